"""The demo report as HTML: the Markdown that the sections write, read by a small converter.

The sections write a narrow Markdown (:mod:`sciml.demos`): headings, paragraphs, ``- `` lists,
pipe tables (:func:`sciml.io_utils.markdown_table`), fenced code blocks, and inline code,
``**bold**``, ``_emphasis_``, links and images. :func:`markdown_to_html` turns exactly that
into one HTML page whose images link the same files as ``report.md`` (paths relative to the
report's folder), so ``report.html`` opens in a browser beside it. The package depends on no
Markdown library; anything else is kept as text, escaped.
"""

from __future__ import annotations

import html
import re

__all__ = ["markdown_to_html"]

_CODE_SPAN = re.compile(r"`([^`]+)`")
_IMAGE = re.compile(r"!\[([^\]]*)\]\(([^)\s]+)\)")
_LINK = re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)")
_BOLD = re.compile(r"\*\*(.+?)\*\*")
_EMPHASIS = re.compile(r"(?<![\w\\])_(\S(?:.*?\S)?)_(?!\w)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*)$")
_STYLE = """
body { font-family: system-ui, sans-serif; max-width: 60rem; margin: 2rem auto;
       padding: 0 1rem; line-height: 1.45; color: #222; }
img { max-width: 100%; height: auto; }
table { border-collapse: collapse; margin: 0.5rem 0; font-size: 0.9rem; }
th, td { border: 1px solid #ccc; padding: 0.2rem 0.5rem; text-align: right; }
th { background: #f3f3f3; }
pre { background: #f6f6f6; padding: 0.6rem; overflow-x: auto; font-size: 0.85rem; }
code { background: #f6f6f6; padding: 0 0.2rem; }
pre code { padding: 0; }
"""


def _inline(text: str) -> str:
    """Escape ``text`` and convert its inline code, images, links, bold and emphasis."""
    spans: list[str] = []

    def keep(match: re.Match[str]) -> str:
        spans.append(f"<code>{html.escape(match[1], quote=False)}</code>")
        return f"\x00{len(spans) - 1}\x00"

    text = html.escape(_CODE_SPAN.sub(keep, text), quote=False)
    text = _IMAGE.sub(lambda m: f'<img src="{html.escape(m[2])}" alt="{m[1]}">', text)
    text = _LINK.sub(lambda m: f'<a href="{html.escape(m[2])}">{m[1]}</a>', text)
    text = _BOLD.sub(r"<strong>\1</strong>", text)
    text = _EMPHASIS.sub(r"<em>\1</em>", text)
    return re.sub(r"\x00(\d+)\x00", lambda m: spans[int(m[1])], text)


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def _table(lines: list[str]) -> str:
    header, *rows = [_cells(line) for line in lines if not re.fullmatch(r"\|[-:|\s]*", line)]
    head = "".join(f"<th>{_inline(cell)}</th>" for cell in header)
    body = "".join(
        "<tr>" + "".join(f"<td>{_inline(cell)}</td>" for cell in row) + "</tr>\n" for row in rows
    )
    return f"<table>\n<thead><tr>{head}</tr></thead>\n<tbody>\n{body}</tbody>\n</table>"


def markdown_to_html(markdown: str, *, title: str = "sciml demo report") -> str:
    """One HTML page of the demo report's Markdown (see the module docstring)."""
    out: list[str] = []
    lines = markdown.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
        elif line.startswith("```"):
            end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("```")), None)
            end = len(lines) if end is None else end
            code = html.escape("\n".join(lines[i + 1 : end]), quote=False)
            out.append(f"<pre><code>{code}</code></pre>")
            i = end + 1
        elif heading := _HEADING.match(line):
            level = len(heading[1])
            out.append(f"<h{level}>{_inline(heading[2])}</h{level}>")
            i += 1
        elif line.startswith("|"):
            end = i
            while end < len(lines) and lines[end].startswith("|"):
                end += 1
            out.append(_table(lines[i:end]))
            i = end
        elif line.startswith("- "):
            items: list[str] = []
            while i < len(lines) and (
                lines[i].startswith("- ") or (items and lines[i].startswith("  "))
            ):
                if lines[i].startswith("- "):
                    items.append(lines[i][2:])
                else:
                    items[-1] += " " + lines[i].strip()
                i += 1
            out.append(
                "<ul>\n" + "".join(f"<li>{_inline(item)}</li>\n" for item in items) + "</ul>"
            )
        else:
            paragraph = []
            while (
                i < len(lines)
                and lines[i].strip()
                and not lines[i].startswith(("```", "|", "- "))
                and not _HEADING.match(lines[i])
            ):
                paragraph.append(lines[i].strip())
                i += 1
            out.append(f"<p>{_inline(' '.join(paragraph))}</p>")
    body = "\n".join(out)
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{html.escape(title)}</title>\n<style>{_STYLE}</style>\n</head>\n<body>\n"
        f"{body}\n</body>\n</html>\n"
    )
