"""The one type of parsed JSON, for values that really are JSON at an I/O boundary: HTTP payloads, JSON files, tool
arguments a model wrote. Nothing in it but types, so the lowest layer can import it.

A value read as ``JSONValue`` is narrowed with ``isinstance`` where it is read; a shape the code reads by key in
several places gets a record (a dataclass or a ``TypedDict``) instead.

>>> import json
>>> value: JSONValue = json.loads('{"a": [1, 2.5, null, true, "x"]}')
>>> isinstance(value, dict) and value["a"]
[1, 2.5, None, True, 'x']
"""

from __future__ import annotations

from typing import TypeAlias

JSONValue: TypeAlias = None | bool | int | float | str | list["JSONValue"] | dict[str, "JSONValue"]
"""Any value ``json.loads`` returns."""

JSONObject: TypeAlias = dict[str, JSONValue]
"""A JSON object (what ``json.loads`` returns for ``{...}``)."""
