#!/usr/bin/env python3
"""Writes a copy of a GGUF model that keeps only its first N transformer blocks.

The tokenizer, embeddings, output head and every other key stay as they are, so
the result is a smaller model of the same family and formats: small enough to
carry where the whole file cannot go (e.g. a GPU machine reached through a
size-limited copy), real enough that two backends' greedy tokens can be compared.

  python3 tools/truncate_gguf.py IN.gguf OUT.gguf --blocks 10

Needs the `gguf` package from PyPI.
"""
import argparse
import re
import sys

import gguf


def copy_field(w: "gguf.GGUFWriter", name: str, field, value=None) -> None:
    """Copies one metadata key of a GGUFReader into a GGUFWriter (or `value` under its type)."""
    vtype = field.types[0]
    sub = field.types[1] if vtype == gguf.GGUFValueType.ARRAY else None
    w.add_key_value(name, field.contents() if value is None else value, vtype, sub)


def finish(w: "gguf.GGUFWriter") -> None:
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--blocks", type=int, required=True)
    a = ap.parse_args()

    r = gguf.GGUFReader(a.src)
    arch = r.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(a.dst, arch=arch)
    for name, field in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        value = None
        if name == f"{arch}.block_count":
            if a.blocks > field.contents():
                sys.exit(f"{a.src} has {field.contents()} blocks, fewer than {a.blocks}")
            value = a.blocks
        copy_field(w, name, field, value)
    for t in r.tensors:
        m = re.match(r"blk\.(\d+)\.", t.name)
        if m and int(m.group(1)) >= a.blocks:
            continue
        w.add_tensor(t.name, t.data, raw_dtype=t.tensor_type)
    finish(w)
    return 0


if __name__ == "__main__":
    sys.exit(main())
