"""Tables as saxutil prints them (tablewriter style), shared by the CLI verbs."""

from __future__ import annotations

from typing import Sequence


def render_table(headers: Sequence[str], rows: Sequence[Sequence[str]], right_aligned: Sequence[int] = ()) -> str:
    """A tablewriter-style ASCII table (upper-case headers); multi-line cells span lines."""
    headers = [h.upper() for h in headers]
    split_rows = [[cell.split("\n") for cell in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in split_rows:
        for i, lines in enumerate(row):
            widths[i] = max(widths[i], *(len(line) for line in lines))
    rule = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
    out = [rule, "| " + " | ".join(h.center(w) for h, w in zip(headers, widths)) + " |", rule]
    for row in split_rows:
        for n in range(max(len(lines) for lines in row)):
            cells = []
            for i, lines in enumerate(row):
                line = lines[n] if n < len(lines) else ""
                cells.append(line.rjust(widths[i]) if i in right_aligned else line.ljust(widths[i]))
            out.append("| " + " | ".join(cells) + " |")
    out.append(rule)
    return "\n".join(out)
