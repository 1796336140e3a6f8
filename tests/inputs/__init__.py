"""A generated harness for inputs that other tools write (issue 40, item 4).

:mod:`tests.inputs.variants` derives, from a valid input, the variants other tools write
(aliases, reordered dims, reversed or shifted coordinates, other units and calendars, int16
packing, other chunks, Zarr, extra variables, NaN, empty, truncated, edited in place), each
with what must hold: the same answer within a bound derived from the change, or a refusal
that names the file. The test modules run every command that reads that kind of input on
them (hypothesis draws each kind's parameters) and check that a refusal left inputs and run
folders byte for byte as they were (:mod:`tests.file_digests`).
"""
