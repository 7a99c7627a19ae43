#!/usr/bin/env python3
"""A GGUF's 2-D tensors dequantized and stored as F16 or BF16 (1-D tensors as F32).

  python3 tools/requantize_gguf.py IN.gguf OUT.gguf F16|BF16

For benchmarking the float-weight path on the default model where llama.cpp's
`llama-quantize --allow-requantize IN OUT F16` is not at hand; metadata is
copied, general.file_type set to match. Needs the `gguf` package (pip install --user gguf).
"""
import sys

import numpy as np
import gguf
from gguf.quants import dequantize, quantize


def main():
    if len(sys.argv) != 4 or sys.argv[3] not in ("F16", "BF16"):
        sys.exit(__doc__)
    src, dst, kind = sys.argv[1:]
    target = gguf.GGMLQuantizationType[kind]
    reader = gguf.GGUFReader(src)
    writer = gguf.GGUFWriter(dst, reader.fields[gguf.Keys.General.ARCHITECTURE].contents())
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue  # written by GGUFWriter itself
        vtype = field.types[0]
        value = field.contents()
        if field.name == gguf.Keys.General.FILE_TYPE:
            value = gguf.LlamaFileType.MOSTLY_F16 if kind == "F16" else gguf.LlamaFileType.MOSTLY_BF16
        writer.add_key_value(field.name, value, vtype,
                             sub_type=field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None)
    tensors = []
    for t in reader.tensors:
        values = dequantize(t.data, t.tensor_type).astype(np.float32)
        if values.ndim >= 2:
            tensors.append((t.name, quantize(values, target), target))
        else:
            tensors.append((t.name, values, gguf.GGMLQuantizationType.F32))
    for name, data, qtype in tensors:
        writer.add_tensor_info(name, data.shape, data.dtype, data.nbytes, qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for _, data, _ in tensors:
        writer.write_tensor_data(data)
    writer.close()


if __name__ == "__main__":
    main()
