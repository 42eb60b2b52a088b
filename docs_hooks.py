"""MkDocs hooks: the site's landing page is the README, its guide pages are ``docs/pages/*.md``.

The pages are written to read on GitHub too, so their links are relative to their own file
(``weights.md``, ``../../bench/results/limit.md``, ``../../README.md#quick-start``); for the site,
every page lies at the root: a link is resolved from its file and rewritten to the page or file
the site holds (``docs/pages/x.md`` is ``x.md``, the README is ``index.md``). Files of the
repository outside ``docs/`` that a page links (benchmark results, examples) are added to the site
at the same path, so those links resolve too.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parent
README = ROOT / "README.md"
PAGES = ROOT / "docs" / "pages"


def site_path(target: Path) -> str | None:
    """Where the site holds the repository file ``target`` (absolute): ``index.md`` for the README,
    ``x.md`` for ``docs/pages/x.md`` and ``docs/x.md``, the file's own path for any other; ``None``
    for a path outside the repository."""
    if target == README:
        return "index.md"
    try:
        relative = target.relative_to(ROOT)
    except ValueError:
        return None
    if relative.parts[:2] == ("docs", "pages"):
        return relative.relative_to("docs/pages").as_posix()
    if relative.parts[:1] == ("docs",):
        return relative.relative_to("docs").as_posix()
    return relative.as_posix()


def for_the_site(text: str, source: Path, linked: set[str]) -> str:
    """``text`` of the file ``source`` with its links rewritten for a page at the site's root; the
    repository files they name outside ``docs/`` are added to ``linked``."""

    def link(match: re.Match[str]) -> str:
        target = match.group(1)
        if target.startswith(("http://", "https://", "#", "mailto:")):
            return match.group(0)
        path, _, anchor = target.partition("#")
        resolved = Path(os.path.normpath(source.parent / path))
        site = site_path(resolved)
        if site is None or not resolved.exists():
            return match.group(0)  # mkdocs --strict reports it
        if not resolved.is_relative_to(ROOT / "docs") and resolved != README:
            linked.add(site)
        return f"]({site}{'#' + anchor if anchor else ''})"

    return re.sub(r"\]\(([^)\s]+)\)", link, text)


#: a reStructuredText role as Markdown renders it in a docstring: :class:<code>~pkg.mod.Name</code>
ROLE = re.compile(r":(?:py:)?(class|meth|func|mod|attr|data|exc|obj):<code>(~?)([^<]+)</code>")
#: what must never reach a page: a role or directive the site did not render
RAW = re.compile(r":(?:py:)?(?:class|meth|func|mod|attr|data|exc|obj):[`<]"
                 r"|\.\. (?:code-block|note|warning)::")
def on_page_content(html: str, page: Any, config: Any, files: Files) -> str:
    """Docstrings' Sphinx roles as code that links to the API reference (``~`` shows the last name
    only, as Sphinx does): ``:class:`~rlcollect.Collector``` becomes a link on ``Collector``."""
    api = "../api/" if config.get("use_directory_urls") else "api.html"
    api = "" if page.file.src_uri == "api.md" else api

    def link(match: re.Match[str]) -> str:
        kind, short, target = match.groups()
        shown = target.rsplit(".", 1)[-1] if short else target
        shown += "()" if kind in ("meth", "func") else ""
        if not target.startswith("rlcollect"):
            return f"<code>{shown}</code>"
        return f'<a class="role" href="{api}#{target}"><code>{shown}</code></a>'

    return ROLE.sub(link, html)


def on_post_build(config: Any) -> None:
    """Point each role's link at the object the API reference documents: its own anchor, else the
    one object of that name documented under another path (``rlcollect.collectors.CollectorStats``
    is documented as ``rlcollect.CollectorStats``), else no link at all."""
    site = Path(config["site_dir"])
    api = site / "api" / "index.html" if config.get("use_directory_urls") else site / "api.html"
    ids = set(re.findall(r'id="(rlcollect[^"]*)"', api.read_text()))
    by_name: dict[str, set[str]] = {}
    for anchor in ids:
        by_name.setdefault(anchor.rsplit(".", 1)[-1], set()).add(anchor)

    def resolve(match: re.Match[str]) -> str:
        prefix, target, code = match.groups()
        if target not in ids and len(by_name.get(target.rsplit(".", 1)[-1], ())) == 1:
            (target,) = by_name[target.rsplit(".", 1)[-1]]
        return f'<a class="role" href="{prefix}#{target}">{code}</a>' if target in ids else code

    for page in site.rglob("*.html"):
        html = page.read_text()
        fixed = re.sub(r'<a class="role" href="([^"#]*)#([^"]+)">(<code>[^<]*</code>)</a>', resolve, html)
        if fixed != html:
            page.write_text(fixed)


def on_post_page(output: str, page: Any, config: Any) -> str:
    """Fail the build on a role or directive left raw on a page."""
    found = RAW.search(output)
    if found is not None:
        from mkdocs.exceptions import PluginError

        start = max(0, found.start() - 80)
        raise PluginError(f"{page.file.src_uri}: a raw reStructuredText role or directive on the page: "
                          f"...{output[start:found.end() + 80]}...")
    return output


def on_files(files: Files, config: Any) -> Files:
    linked: set[str] = set()
    sources = {"index.md": README, **{page.name: page for page in sorted(PAGES.glob("*.md"))}}
    for page, source in sources.items():
        files.append(File.generated(config, page, content=for_the_site(source.read_text(), source, linked)))
    while linked:  # repository files linked from the pages (their own links stay as they are written)
        path = linked.pop()
        if files.get_file_from_path(path) is not None:
            continue
        content = (ROOT / path).read_text() if path.endswith(".md") else (ROOT / path).read_bytes()
        files.append(File.generated(config, path, content=content))
    return files
