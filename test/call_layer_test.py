#!/usr/bin/env python3
"""Keeps the call layer's rule (docs/design/loading.md, "The call layer").

Scans lib/**/*.cpp, lib/**/*.hpp and include/custream/**/*.hpp and fails, printing
file:line and the rule, on

  raw-call     a driver call made through the entry table (`api().cuX(`, `api.cuX(`,
               `l->api.cuX(`, `(api.*Field)(`) without a `// raw: <why>` comment on the
               same line, outside the call layer itself;
  entry-name   a string literal that names a driver entry of the table's X-list
               ("cuStreamSynchronize…"), outside the call layer: an error names the call
               through detail::EntryInfo<&DriverApi::cuX>::name;
  throw-error  `throw Error(` outside the throw helpers (lib/error.cpp): errors are thrown
               through detail::fail / throw_call_error / throw_stream_error / throw_error.

Usage: call_layer_test.py <source root>. Run by `meson test call-layer`.
"""

import pathlib
import re
import sys

# The call layer: where entries are called raw, named as strings, and errors thrown.
CALL_LAYER = {
    "include/custream/detail/call.hpp",  # the layer
    "include/custream/detail/driver_table.hpp",  # the X-list itself
    "lib/result_names.cpp",  # the table of CUresult names (generated)
}
THROW_HELPERS = {"lib/error.cpp"}

# Files being restructured, whose sites are fixed when they land (none now: every file of
# lib/ and include/custream/ keeps the rules).
BEING_RESTRUCTURED = ()

# Public headers that throw an Error subclass naming its one call (the class is that call's
# error): the name is part of the public type, which includes no driver table.
ENTRY_NAME_IN_ERROR_TYPE = {
    "include/custream/graph_instantiate_error.hpp",
    "include/custream/graph_update_error.hpp",
}


def entries(root):
    """Field and symbol names of the driver table's X-list."""
    text = (root / "include/custream/detail/driver_table.hpp").read_text()
    names = set()
    for field, symbol in re.findall(r"\bX\((\w+),\s*(\w+),\s*\d+,\s*(?:true|false)\)", text):
        names.add(field)
        names.add(symbol)
    if len(names) < 50:
        sys.exit("call_layer_test: found only %d entries in driver_table.hpp" % len(names))
    return names


def lex(text):
    """Per line: (code with strings and comments blanked, [string literals], comment text)."""
    lines = []
    code, strings, comment = [], [], []
    i, n = 0, len(text)
    in_block = False
    while i < n:
        c = text[i]
        if c == "\n":
            lines.append(("".join(code), strings, "".join(comment)))
            code, strings, comment = [], [], []
            i += 1
            continue
        if in_block:
            if text.startswith("*/", i):
                in_block = False
                i += 2
            else:
                comment.append(c)
                i += 1
            continue
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            comment.append(text[i:j])
            i = j
            continue
        if text.startswith("/*", i):
            in_block = True
            i += 2
            continue
        m = re.match(r'R"([^(\s]*)\(', text[i:i + 20]) if c == "R" else None
        if m and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            end = text.find(")" + m.group(1) + '"', i)
            end = n if end < 0 else end
            body = text[i + len(m.group(0)):end]
            strings.append(body)
            code.append('""')
            # a raw string spanning lines counts on its first line
            for _ in range(body.count("\n")):
                lines.append(("".join(code), strings, "".join(comment)))
                code, strings, comment = [], [], []
            i = end + len(m.group(1)) + 2
            continue
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            if c == '"':
                strings.append(text[i + 1:j])
            code.append(c + c)
            i = j + 1
            continue
        code.append(c)
        i += 1
    lines.append(("".join(code), strings, "".join(comment)))
    return lines


RAW_CALLS = [
    # api().cuX(, api.cuX(, l->api.cuX(, loaded().api.cuX(
    re.compile(r"(?:\.|->)\s*(cu[A-Z]\w*)\s*\("),
    # (api.*Field)(args), (l->api.*Field)(args)
    re.compile(r"(\.\*\s*\w+)\s*\)\s*\("),
]
THROW = re.compile(r"\bthrow\s+Error\s*[({]")


def scan(root, names):
    files = sorted(
        [p for p in (root / "lib").rglob("*.cpp")]
        + [p for p in (root / "lib").rglob("*.hpp")]
        + [p for p in (root / "include/custream").rglob("*.hpp")]
    )
    if len(files) < 20:
        sys.exit("call_layer_test: found only %d sources under %s" % (len(files), root))
    problems = []
    allowed = []
    for path in files:
        rel = path.relative_to(root).as_posix()
        restructured = rel.startswith(BEING_RESTRUCTURED)
        found = []
        for number, (code, strings, comment) in enumerate(lex(path.read_text()), 1):
            if rel not in CALL_LAYER and not re.search(r"\braw:\s*\S", comment):
                for pattern in RAW_CALLS:
                    for m in pattern.finditer(code):
                        if m.group(1).startswith(".*") or m.group(1) in names:
                            found.append((number, "raw-call",
                                          "raw driver call %s( without a `// raw: <why>` "
                                          "comment; use detail::call/try_call/release_call/"
                                          "stream_call" % m.group(1)))
            if rel not in CALL_LAYER and rel not in ENTRY_NAME_IN_ERROR_TYPE:
                for s in strings:
                    m = re.match(r"(cu[A-Z]\w*)", s)
                    if m and m.group(1) in names:
                        found.append((number, "entry-name",
                                      '"%s" spells a driver entry; name it through '
                                      "detail::EntryInfo<&DriverApi::%s>::name" %
                                      (m.group(1), m.group(1))))
            if rel not in THROW_HELPERS and THROW.search(code):
                found.append((number, "throw-error",
                              "throw Error( outside the throw helpers; use detail::fail, "
                              "throw_call_error, throw_stream_error or throw_error"))
        for number, rule, why in found:
            (allowed if restructured else problems).append("%s:%d: [%s] %s" %
                                                           (rel, number, rule, why))
    return problems, allowed


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    names = entries(root)
    problems, allowed = scan(root, names)
    if allowed:
        print("allowlisted (files being restructured): %d site(s)" % len(allowed))
    for p in problems:
        print(p)
    counts = {}
    for p in problems:
        rule = p.split("[", 1)[1].split("]", 1)[0]
        counts[rule] = counts.get(rule, 0) + 1
    if problems:
        print("call layer broken: " +
              ", ".join("%s %d" % (r, c) for r, c in sorted(counts.items())))
        return 1
    print("call layer kept: no raw driver call unmarked, no entry named as a string, "
          "no throw Error( outside the helpers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
