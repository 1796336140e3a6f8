"""Halo exchange.

The plan, the overlap geometry, the batched exchange, its autograd functions and
the collectives of the two loss conventions.
"""
