"""Replacing one generated region of a markdown file, shared by the report scripts.

A region sits between a begin and an end marker (`<!-- NAME:begin -->`, `<!-- NAME:end -->`);
everything outside it is kept. Standard library only.
"""

import json
import os
import sys


def update_markdown(path, begin, end, section, intro="# Benchmarks\n"):
    """Replaces the region of `path` between `begin` and `end` by `section` (which carries the
    markers itself), appending it if the file has no such region; a missing file starts as
    `intro`. The file is replaced atomically."""
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            text = f.read()
    else:
        text = intro
    b = text.find(begin)
    e = text.find(end, b + len(begin)) if b >= 0 else -1
    if b >= 0 and e >= 0:
        new = text[:b] + section.rstrip("\n") + text[e + len(end):]
    else:
        if b >= 0:
            print("{} has '{}' but no '{}'; appending a new region".format(path, begin, end), file=sys.stderr)
        new = text.rstrip("\n") + "\n\n" + section
    if not new.endswith("\n"):
        new += "\n"
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(new)
    os.replace(tmp, path)


def publish(section, path, begin, end):
    """Writes `section` into the region of the markdown file `path`, or prints it when no file
    is given (the report scripts' --markdown option)."""
    if path:
        update_markdown(path, begin, end, section)
    else:
        print(section)


def pyplot(script):
    """matplotlib.pyplot with the Agg backend, or None (and a message) when it is missing."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"{script}: matplotlib is not installed; plot skipped", file=sys.stderr)
        return None
    return plt


def save(table, data, markdown_path=None, json_path=None):
    """Writes a report's markdown table and its data (as JSON) to the files asked for, if any
    (the report scripts' --markdown and --json options)."""
    if markdown_path:
        with open(markdown_path, "w", encoding="utf-8") as f:
            f.write(table)
    if json_path:
        with open(json_path, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1)
