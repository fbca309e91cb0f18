"""Reading what tally_microbench prints: one JSON object per measurement line, among others.
Shared by the report scripts; standard library only."""

import json


def measurements(path):
    """The JSON objects of the file's lines that are one ({"bench": ..., "median": ...})."""
    out = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                out.append(json.loads(line))
    return out
