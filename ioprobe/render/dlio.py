"""A DLIO workload as YAML: each value with a comment naming its source, then what DLIO cannot
reproduce. Written by hand (the values are plain scalars), deterministic: sections in DLIO's
own order, keys in the order the analysis gave them."""

from __future__ import annotations

import json

from ioprobe.analysis.dlio import DlioWorkload, Value
from ioprobe.redact import shown, shown_all

SECTIONS = ("model", "framework", "workflow", "dataset", "reader", "train", "metric", "storage")


def _scalar(v: Value) -> str:
    if isinstance(v, bool):
        return "True" if v else "False"
    if isinstance(v, int):
        return repr(v)
    if isinstance(v, float):
        # YAML 1.1 (PyYAML, which DLIO's Hydra reads with) takes "5e-05" for a string: a
        # float in exponent form needs its point, "5.0e-05"
        text = repr(v)
        mantissa, e, exponent = text.partition("e")
        return f"{mantissa}.0e{exponent}" if e and "." not in mantissa else text
    # a JSON string is a valid double-quoted YAML scalar: nothing in it can be misread
    return json.dumps(v)


def to_yaml(w: DlioWorkload, header: list[str]) -> str:
    """The workload file, ``header`` lines first as comments. Every comment's text crosses
    ``redact.shown``: a newline in a record's field or a file name would end the comment and
    start a live YAML key."""
    w = shown_all(w)
    lines = [f"# {shown(h)}" for h in header]
    for section in SECTIONS:
        rows = [f for f in w.fields if f.section == section]
        if not rows:
            continue
        lines.append("")
        if len(rows) == 1 and rows[0].key == "":
            lines.append(f"{section}: {_scalar(rows[0].value)}  # {rows[0].source}")
            continue
        lines.append(f"{section}:")
        opened = ""
        for f in rows:
            # "storage_options.endpoint_url": a key of a mapping inside the section
            parent, dot, key = f.key.rpartition(".")
            if dot and parent != opened:
                lines.append(f"  {parent}:")
            opened = parent
            indent = "    " if dot else "  "
            lines.append(f"{indent}{key}: {_scalar(f.value)}  # {f.source}")
    if w.not_carried:
        lines += ["", "# not carried over:"]
        lines.extend(f"# - {n}" for n in w.not_carried)
    return "\n".join(lines) + "\n"
