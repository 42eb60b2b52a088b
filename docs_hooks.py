"""MkDocs hooks: the site's guide pages are the README's sections, so the two never drift apart.

Each page of ``PAGES`` is made at build time from the README sections it names (with their
subsections), followed by the hand-written page of the same name in ``docs/`` when there is one.
Links are rewritten for the site: ``docs/x.md`` and ``docs/pages/x.md`` to ``x.md``; files of the repository outside
``docs/`` (benchmark results, examples) are added to the site at the same path, so those links
resolve too.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parent
README = ROOT / "README.md"

# page -> (title, README sections in order)
PAGES: dict[str, tuple[str, list[str]]] = {
    "install.md": ("Install and first run", []),
    "index.md": ("Getting started", ["Two commands", "Quick start", "The batch"]),
    "collectors.md": ("Which collector when", ["Which collector: `rlcollect tune`",
                                                "Multi-process collection: the main-module guard",
                                                "Batched inference: `AsyncBatchedCollector`"]),
    "weights.md": ("Workers, weights and schemes", ["Workers, weights and faults"]),
    "replay.md": ("Replay and background collection", ["Replay buffers and background collection",
                                                       "Whole episodes"]),
    "logging.md": ("Logging and video", ["Logging and video"]),
    "envpool.md": ("EnvPool", ["EnvPool"]),
    "ray_guide.md": ("Ray", ["Across machines: Ray"]),
    "recurrent.md": ("Recurrent policies", []),
    "torchrl.md": ("Coming from TorchRL", ["Coming from TorchRL"]),
    "cli.md": ("The command line", ["Command line"]),
    "benchmarks.md": ("Benchmarks", ["Benchmarks"]),
    "security.md": ("Security and trust", ["Security and trust"]),
    "reliability.md": ("Reliability", ["Reliability"]),
    "examples.md": ("Examples", ["Examples"]),
    "architecture.md": ("Architecture", ["Architecture"]),
    "performance.md": ("Performance", []),
    "api.md": ("API reference", []),
}


def readme_sections() -> dict[str, str]:
    """``{title: text}`` of the README's ``## `` sections (their ``###`` subsections included)."""
    text = README.read_text()
    parts = re.split(r"^## (.+)\n", text, flags=re.M)
    return {parts[i].strip(): parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def slug(title: str) -> str:
    """The anchor Markdown's table of contents gives a heading (``Logging and video`` ->
    ``logging-and-video``)."""
    return re.sub(r"[\s]+", "-", re.sub(r"[^\w\s-]", "", title).strip().lower())


def section_pages() -> dict[str, str]:
    """``{anchor: page}`` for every README section that is on a page."""
    return {slug(name): page for page, (_, names) in PAGES.items() for name in names}


def for_the_site(text: str, linked: set[str], page: str = "") -> str:
    """Links rewritten for the site; the repository files they name are added to ``linked``.
    A README anchor (``#logging-and-video``) becomes a link to the page holding that section."""
    pages = section_pages()

    def link(match: re.Match[str]) -> str:
        target = match.group(1)
        if target.startswith("#") and pages.get(target[1:], page) != page:
            return f"]({pages[target[1:]]}{target})"
        if target.startswith(("http://", "https://", "#", "mailto:")):
            return match.group(0)
        path, _, anchor = target.partition("#")
        if path.startswith("docs/"):  # a page of its own (docs/pages/x.md) is the site's x.md
            path = path.removeprefix("docs/").removeprefix("pages/")
        elif (ROOT / path).exists():
            linked.add(path)
        return f"]({path}{'#' + anchor if anchor else ''})"

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
    sections = readme_sections()
    linked: set[str] = set()
    for page, (title, names) in PAGES.items():
        own = ROOT / "docs" / "pages" / page
        if len(names) == 1:  # one section: its heading is the page's title, its subsections one up
            text = re.sub(r"^### ", "## ", for_the_site(sections[names[0]], linked, page), flags=re.M)
            body = [f"# {names[0]}\n" + text]
        else:
            body = [] if own.exists() and not names else [f"# {title}\n"]  # a page of its own has its title
            body += [f"## {name}\n" + for_the_site(sections[name], linked, page) for name in names]
        if own.exists():
            body.append(for_the_site(own.read_text(), linked, page))
        files.append(File.generated(config, page, content="\n".join(body)))
    while linked:  # repository files linked from the pages, and the files they link in turn
        path = linked.pop()
        if files.get_file_from_path(path) is not None:
            continue
        content = (ROOT / path).read_text() if path.endswith(".md") else (ROOT / path).read_bytes()
        if isinstance(content, str):
            content = for_the_site(content, set())  # their own links stay as they are written
        files.append(File.generated(config, path, content=content))
    return files
