#!/usr/bin/env python3
# Seeds for tools/fuzz gguf: small valid files with every value type, both
# versions, a custom alignment and each tensor type, and the real model's header
# (its first 16 KiB as they are, and its metadata up to the first big array made
# a valid file).
#   make_gguf_seeds.py OUT_DIR MODEL
import os, struct, sys
out, model = sys.argv[1], sys.argv[2]
if os.path.isfile(model):
    with open(model, 'rb') as f:
        open(f'{out}/model-prefix.gguf', 'wb').write(f.read(16384))
U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
FMT = {U8: '<B', I8: '<b', U16: '<H', I16: '<h', U32: '<I', I32: '<i', F32: '<f', BOOL: '<B',
       U64: '<Q', I64: '<q', F64: '<d'}
def s(x): b = x.encode(); return struct.pack('<Q', len(b)) + b
def val(t, v):
    if t == STRING: return s(v)
    if t == ARRAY:
        et, items = v
        return struct.pack('<IQ', et, len(items)) + b''.join(val(et, i) for i in items)
    return struct.pack(FMT[t], v)
# (type id, block elements, block bytes) for F32, F16, Q4_0, Q4_1, Q8_0, Q8_1, BF16
TYPES = [(0, 1, 4), (1, 1, 2), (2, 32, 18), (3, 32, 20), (8, 32, 34), (9, 32, 36), (30, 1, 2)]
def gguf(kvs, tensors, version=3, align=32):
    head = b'GGUF' + struct.pack('<IQQ', version, len(tensors), len(kvs))
    head += b''.join(s(k) + struct.pack('<I', t) + val(t, v) for k, t, v in kvs)
    data, infos = b'', b''
    for name, dims, (tid, be, bb) in tensors:
        n = 1
        for d in dims: n *= d
        data += b'\0' * (-len(data) % align)
        infos += s(name) + struct.pack('<I', len(dims)) + b''.join(struct.pack('<Q', d) for d in dims)
        infos += struct.pack('<IQ', tid, len(data))
        data += bytes((i * 7) & 255 for i in range(n // be * bb))
    body = head + infos
    return body + b'\0' * (-len(body) % align) + data
every = [('general.architecture', STRING, 'llama'), ('u8', U8, 7), ('i8', I8, -7), ('u16', U16, 7),
         ('i16', I16, -7), ('u32', U32, 7), ('i32', I32, -7), ('f32', F32, 0.5), ('b', BOOL, 1),
         ('u64', U64, 7), ('i64', I64, -7), ('f64', F64, 0.25),
         ('tokens', ARRAY, (STRING, ['<s>', 'a', 'bc'])), ('ids', ARRAY, (I32, [1, 2, 3])),
         ('nested', ARRAY, (ARRAY, [(U8, [1, 2]), (STRING, ['x'])]))]
tensors = [('t%d' % i, [32, 2], t) for i, t in enumerate(TYPES)]
seeds = {
    'every-type.gguf': gguf(every, tensors),
    'version2.gguf': gguf(every[:3], tensors[:2], version=2),
    'align64.gguf': gguf([('general.alignment', U32, 64)], [('a', [16], TYPES[0]), ('b', [64, 3], TYPES[4])], align=64),
    'no-tensors.gguf': gguf(every[:1], []),
}
if os.path.isfile(model):
    # Walk the model's metadata and keep every entry before the first large array.
    with open(model, 'rb') as f:
        head = f.read(1 << 20)
    pos, kept = 24, 0
    def skip(t, pos):
        if t == STRING: return pos + 8 + struct.unpack_from('<Q', head, pos)[0]
        if t != ARRAY: return pos + struct.calcsize(FMT[t])
        et, n = struct.unpack_from('<IQ', head, pos)
        pos += 12
        for _ in range(n): pos = skip(et, pos)
        return pos
    while kept < struct.unpack_from('<Q', head, 16)[0]:
        vpos = pos + 8 + struct.unpack_from('<Q', head, pos)[0]
        t = struct.unpack_from('<I', head, vpos)[0]
        if t == ARRAY and struct.unpack_from('<Q', head, vpos + 8)[0] > 64: break
        pos, kept = skip(t, vpos + 4), kept + 1
    seeds['model-header.gguf'] = head[:8] + struct.pack('<QQ', 0, kept) + head[24:pos]
for name, b in seeds.items():
    open(f'{out}/{name}', 'wb').write(b)
