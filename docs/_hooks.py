"""MkDocs hooks (mkdocs.yml ``hooks:``): the repository's pages link to the notebooks as
``../notebooks/X.ipynb`` (right on GitHub); on the site they are ``notebooks/X.ipynb`` under
the docs folder (``docs/notebooks`` links to ``../notebooks``)."""

from __future__ import annotations

import posixpath
import re
from typing import Any

_LINK = re.compile(r"\]\(((?:\.\./)+)notebooks/")


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:  # noqa: ARG001
    depth = page.file.src_uri.count("/")  # folders between docs/ and the page

    def fix(match: re.Match[str]) -> str:
        ups = match.group(1).count("../")
        if ups != depth + 1:  # not a link from the docs folder up to the repository root
            return match.group(0)
        return "](" + posixpath.join(*([".."] * depth), "notebooks/") if depth else "](notebooks/"

    return _LINK.sub(fix, markdown)
