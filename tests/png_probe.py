#!/usr/bin/env python3
# png_probe.py — count the pixels of one colour inside a box of a PNG that ptd-studio wrote
# (8-bit RGB or RGBA, not interlaced: what stb_image_write makes), with the standard library
# only (no Pillow on the CI image). studio_screenshot.sh uses it to check that a screenshot
# shows what it should where it should (issue 33 point 6).
#
#   png_probe.py FILE X0 Y0 X1 Y1 RRGGBB [TOLERANCE]
#
# Prints the number of pixels in [X0, X1) × [Y0, Y1) whose every channel is within
# TOLERANCE (default 12) of RRGGBB. Exit 2 with a message for a file it cannot read.
import struct
import sys
import zlib


def read_png(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    pos, idat, width, height, channels = 8, b"", 0, 0, 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        body = data[pos + 8 : pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
            if depth != 8 or colour not in (2, 6) or interlace:
                raise ValueError(f"unsupported PNG (depth {depth}, colour type {colour}, interlace {interlace})")
            channels = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
    raw = zlib.decompress(idat)
    stride = width * channels
    rows, prev = [], bytearray(stride)
    for y in range(height):
        ftype = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b = prev[i]
            c = prev[i - channels] if i >= channels else 0
            if ftype == 1:
                line[i] = (line[i] + a) & 0xFF
            elif ftype == 2:
                line[i] = (line[i] + b) & 0xFF
            elif ftype == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif ftype == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else b if pb <= pc else c
                line[i] = (line[i] + pred) & 0xFF
        rows.append(line)
        prev = line
    return width, height, channels, rows


def main(argv):
    if len(argv) not in (7, 8):
        print("usage: png_probe.py FILE X0 Y0 X1 Y1 RRGGBB [TOLERANCE]", file=sys.stderr)
        return 2
    try:
        width, height, channels, rows = read_png(argv[1])
    except (OSError, ValueError, zlib.error, struct.error) as e:
        print(f"png_probe: {argv[1]}: {e}", file=sys.stderr)
        return 2
    x0, y0, x1, y1 = (int(v) for v in argv[2:6])
    want = bytes.fromhex(argv[6])
    tol = int(argv[7]) if len(argv) == 8 else 12
    count = 0
    for y in range(max(0, y0), min(height, y1)):
        line = rows[y]
        for x in range(max(0, x0), min(width, x1)):
            p = line[x * channels : x * channels + 3]
            if all(abs(p[k] - want[k]) <= tol for k in range(3)):
                count += 1
    print(count)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
