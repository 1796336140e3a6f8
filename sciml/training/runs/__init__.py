"""A run: its folder (claimed, locked, written atomically) and the one record it holds.

:mod:`~sciml.training.runs.folder` claims and locks a run folder;
:mod:`~sciml.training.runs.record` is the folder's record and the one list of the fields
a resumed run may change (:data:`~sciml.training.runs.record.RESUMABLE_FIELDS`).
"""
