"""The Flight Recorder's records of several ranks, read side by side: where the ranks' collectives first
differ. Notebook 07 prints this table from the records its ranks return, and `diagnose` prints it from the
dumps of a job that hung; this module imports no torch, so the command stays quick when nothing is dumped.
"""

from __future__ import annotations

from typing import Any

__all__ = ["FR_FIELDS", "side_by_side"]

# the fields of one record that the table shows (a record holds many more: state, times, the stack)
FR_FIELDS = ("collective_seq_id", "profiling_name", "input_sizes")


def side_by_side(results: dict[int, dict[str, Any]]) -> list[str]:
    """The ranks' records as rows: sequence number, then each rank's operation and input sizes, and
    whether they match. A rank with fewer records never reached that collective."""
    ranks = sorted(results)
    longest = max(len(results[r]["records"]) for r in ranks)
    rows = ["seq  " + "".join(f"rank {r:<22}" for r in ranks) + "same?"]
    for i in range(longest):
        cells = []
        for r in ranks:
            records = results[r]["records"]
            if i < len(records):
                e = records[i]
                cells.append(f"{e['profiling_name'].split(':')[-1]} {e['input_sizes']}")
            else:
                cells.append("(never reached)")
        seq = next(results[r]["records"][i]["collective_seq_id"] for r in ranks if i < len(results[r]["records"]))
        rows.append(f"{seq:<5}" + "".join(f"{c:<27}" for c in cells) + str(len(set(cells)) == 1))
    return rows
