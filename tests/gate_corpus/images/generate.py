#!/usr/bin/python3
# Writes the image corpus (one file per case) and cases.json beside this script,
# and seeds for tests/fuzz/corpus/images/. Standard library only (struct, zlib);
# matplotlib, when /usr/bin/python3 has it, adds real-world output. Re-run after
# changing a case and commit what it writes: the files are the test data.
import json
import os
import struct
import sys
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
SEEDS = os.path.join(HERE, "..", "..", "fuzz", "corpus", "images")
CAP = 50_000_000  # the corpus's pixel cap (policy artifacts.image_pixels_max)

cases = []


def case(file, data, expect, reason_contains, reader, source, pixels_max=None):
    with open(os.path.join(HERE, file), "wb") as f:
        f.write(data)
    c = {"file": file, "expect": expect, "reason_contains": reason_contains, "reader": reader, "source": source}
    if pixels_max is not None:
        c["pixels_max"] = pixels_max
    cases.append(c)


# ---- PNG -------------------------------------------------------------------

SIG = b"\x89PNG\r\n\x1a\n"


def chunk(kind, data, crc=None):
    if crc is None:
        crc = zlib.crc32(kind + data) & 0xFFFFFFFF
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)


def ihdr(w, h, depth=8, colour=0, interlace=0):
    return chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, colour, 0, 0, interlace))


def idat_for(w, h, depth=8, colour=0):
    """A real IDAT: h rows of zeros with filter byte 0 (decodable, compresses well)."""
    channels = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}[colour]
    row = (w * channels * depth + 7) // 8
    raw = (b"\x00" + b"\x00" * row) * h
    return chunk(b"IDAT", zlib.compress(raw, 9))


TINY_IDAT = chunk(b"IDAT", zlib.compress(b"\x00", 9))  # one row's filter byte: a bomb needs no more
IEND = chunk(b"IEND", b"")


def png(w, h, depth=8, colour=0):
    return SIG + ihdr(w, h, depth, colour) + idat_for(w, h, depth, colour) + IEND


def fctl(seq, w, h, x=0, y=0):
    return chunk(b"fcTL", struct.pack(">IIIIIHHBB", seq, w, h, x, y, 1, 10, 0, 0))


def actl(frames):
    return chunk(b"acTL", struct.pack(">II", frames, 0))


def fdat(seq, w, h):
    raw = (b"\x00" + b"\x00" * w) * h
    return chunk(b"fdAT", struct.pack(">I", seq) + zlib.compress(raw, 9))


VIEWER = "image viewers and browsers that allocate width x height before decoding"
APNG_READER = "APNG readers (Firefox, Chromium, Safari) that composite each frame onto the canvas"
ANIM_READER = ("animation readers and converters that decode every frame onto the canvas "
               "(ImageMagick, Pillow ImageSequence, browsers' frame caches)")

case("png_1x1.png", png(1, 1), "accepted", "", VIEWER, "hand-made: a 1 x 1 greyscale PNG (PNG 3rd ed. 11.2.1)")
case("png_at_cap_10000x5000.png", png(10000, 5000, depth=1), "accepted", "", VIEWER,
     "hand-made: exactly the 50,000,000-pixel cap, 1-bit greyscale with a real IDAT")
case("png_over_cap_10001x5000.png", SIG + ihdr(10001, 5000, 1) + TINY_IDAT + IEND, "rejected",
     "10001 x 5000 pixels (50005000) is above the policy's 50000000", VIEWER,
     "hand-made: one column above the cap")
case("png_100000x100000.png", SIG + ihdr(100000, 100000) + TINY_IDAT + IEND, "rejected",
     "image: 100000 x 100000 pixels (10000000000) is above the policy's 50000000", VIEWER,
     "hand-made pixel flood: IHDR + tiny IDAT + IEND, the bomb Pillow's DecompressionBombError and "
     "libpng's user limits guard against")
case("png_max_31bit.png", SIG + ihdr(0x7FFFFFFF, 0x7FFFFFFF) + TINY_IDAT + IEND, "rejected",
     "2147483647 x 2147483647 pixels (4611686014132420609)", VIEWER,
     "hand-made: the largest legal IHDR, whose product needs 62 bits")
case("png_width_2p31.png", SIG + ihdr(0x80000000, 1) + TINY_IDAT + IEND, "rejected",
     "IHDR width 2147483648 at byte 16 is not in 1..2147483647", "libpng and every PNG reader (PNG 11.2.1: sizes are 31-bit)",
     "hand-made: width 2^31, one past the PNG limit")
case("png_height_0.png", SIG + ihdr(1, 0) + TINY_IDAT + IEND, "rejected",
     "IHDR height 0 at byte 20", "libpng and every PNG reader (PNG 11.2.1: zero is invalid)", "hand-made")
case("png_small_cap.png", png(200, 200), "rejected", "200 x 200 pixels (40000) is above the policy's 10000", VIEWER,
     "hand-made: a valid image over a smaller policy cap", pixels_max=10000)

good_ihdr = ihdr(100000, 100000)
bad_crc = good_ihdr[:-4] + struct.pack(">I", (struct.unpack(">I", good_ihdr[-4:])[0] ^ 1))
case("png_bad_ihdr_crc.png", SIG + bad_crc + TINY_IDAT + IEND, "rejected", "IHDR chunk at byte 8 has CRC",
     "libpng (refuses a critical chunk with a bad CRC) versus readers that skip CRCs and trust the size",
     "hand-made: the 100000 x 100000 IHDR with one CRC bit flipped")
case("png_bad_depth.png", SIG + ihdr(4, 4, depth=4, colour=2) + TINY_IDAT + IEND, "rejected",
     "bit depth 4 with colour type 2 at byte 24 is not a valid combination",
     "libpng and PNG readers (PNG 11.2.1 table 11.1)", "hand-made: RGB at 4 bits, which PNG does not define")
case("png_first_chunk_not_ihdr.png", SIG + chunk(b"tEXt", b"k\x00v") + ihdr(1, 1) + TINY_IDAT + IEND, "rejected",
     "first chunk is tEXt at byte 8, not IHDR", "libpng and PNG readers (PNG 5.6: IHDR comes first)",
     "hand-made: a text chunk before IHDR (libmagic calls it 'data', so Gate::check refuses it at the type check first)")
full = png(64, 64)
case("png_truncated.png", full[:len(full) - 20], "rejected", "runs past the end of the file",
     "viewers that show a partial image and allocate the declared size first", "hand-made: a valid PNG cut inside IDAT")
case("png_no_iend.png", full[:len(full) - 12], "rejected", "(no IEND)",
     "viewers that show a partial image and allocate the declared size first", "hand-made: a valid PNG without IEND")
case("png_chunk_length_huge.png", SIG + ihdr(1, 1) + struct.pack(">I", 0x7FFFFFF0) + b"IDAT" + b"\x00" * 8 + IEND,
     "rejected", "IDAT chunk of 2147483632 bytes at byte 33 runs past the end of the file",
     "chunk walkers that trust a length (every PNG reader walks chunks by it)", "hand-made: a chunk length past the end")

# APNG: valid two-frame animation, a frame outside the canvas, and an animation bomb.
apng_ok = (SIG + ihdr(4, 4) + actl(2) + fctl(0, 4, 4) + idat_for(4, 4) + fctl(1, 2, 2, 2, 2) + fdat(2, 2, 2) + IEND)
case("apng_two_frames.png", apng_ok, "accepted", "", APNG_READER, "hand-made: APNG 1.0, default image plus one 2 x 2 frame")
apng_out = (SIG + ihdr(4, 4) + actl(2) + fctl(0, 4, 4) + idat_for(4, 4) + fctl(1, 60000, 60000, 3, 3)
            + fdat(2, 1, 1) + IEND)
case("apng_frame_outside.png", apng_out, "rejected", "is outside the 4 x 4 canvas", APNG_READER,
     "hand-made: a 60000 x 60000 fcTL on a 4 x 4 canvas (APNG 4.2 requires frames inside it)")
many = SIG + ihdr(5000, 5000) + actl(20) + fctl(0, 5000, 5000) + TINY_IDAT
for i in range(1, 20):
    many += fctl(2 * i - 1, 5000, 5000) + chunk(b"fdAT", struct.pack(">I", 2 * i) + zlib.compress(b"\x00", 9))
many += IEND
case("apng_many_frames.png", many, "rejected", "20 frames of 5000 x 5000 pixels (500000000 in all) are above 8 x",
     ANIM_READER, "hand-made animation bomb: 20 frames of a 25 M-pixel canvas, each frame under the cap")
case("apng_frame_count_mismatch.png",
     SIG + ihdr(4, 4) + actl(1000000) + fctl(0, 4, 4) + idat_for(4, 4) + IEND, "rejected",
     "acTL declares 1000000 frames but the file has 1 fcTL chunks",
     "APNG readers that reserve num_frames frame records from acTL", "hand-made: acTL num_frames != fcTL count (APNG 4.1)")

# ---- JPEG ------------------------------------------------------------------


def seg(marker, payload):
    return bytes([0xFF, marker]) + struct.pack(">H", len(payload) + 2) + payload


def sof(w, h, marker=0xC0):
    return seg(marker, struct.pack(">BHHB", 8, h, w, 1) + b"\x01\x11\x00")


JFIF = seg(0xE0, b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00")
DQT = seg(0xDB, b"\x00" + b"\x01" * 64)
# One code of length 1 in each table: DC category 0 and AC EOB are both the bit "0".
DHT = seg(0xC4, b"\x00" + b"\x01" + b"\x00" * 15 + b"\x00") + seg(0xC4, b"\x10" + b"\x01" + b"\x00" * 15 + b"\x00")
SOS = seg(0xDA, b"\x01\x01\x00\x00\x3F\x00")
SOI, EOI = b"\xFF\xD8", b"\xFF\xD9"


def scan(blocks):
    """Per 8 x 8 block DC "0" and EOB "0"; padded with 1 bits (T.81 F.1.2.3), never a whole 0xFF."""
    bits = "00" * blocks
    bits += "1" * (-len(bits) % 8)
    return bytes(int(bits[i:i + 8], 2) for i in range(0, len(bits), 8))


def jpeg(w, h, extra=b"", marker=0xC0):
    blocks = ((w + 7) // 8) * ((h + 7) // 8)
    return SOI + JFIF + extra + DQT + sof(w, h, marker) + DHT + SOS + scan(blocks) + EOI


def exif_with_thumbnail(thumb):
    """APP1 Exif: a big-endian TIFF header, an empty IFD0, and IFD1 pointing at the JPEG thumbnail."""
    ifd0 = struct.pack(">H", 0) + struct.pack(">I", 14)
    ifd1 = (struct.pack(">H", 2) + struct.pack(">HHII", 0x0201, 4, 1, 44) + struct.pack(">HHII", 0x0202, 4, 1, len(thumb))
            + struct.pack(">I", 0))
    return seg(0xE1, b"Exif\x00\x00" + b"MM\x00\x2A" + struct.pack(">I", 8) + ifd0 + ifd1 + thumb)


JPEG_READER = "JPEG decoders (libjpeg-turbo in browsers and viewers) that allocate the SOF size before decoding"
case("jpeg_8x8.jpg", jpeg(8, 8), "accepted", "", JPEG_READER, "hand-made baseline JPEG, 8 x 8 grey (T.81 B.2)")
thumb = jpeg(160, 120)
case("jpeg_exif_thumbnail.jpg", jpeg(8, 8, extra=exif_with_thumbnail(thumb)), "accepted", "", JPEG_READER,
     "hand-made: an 8 x 8 JPEG whose APP1 EXIF block holds a 160 x 120 JPEG thumbnail (skipped by length)")
case("jpeg_huge_sof.jpg", SOI + JFIF + DQT + sof(65535, 65535) + DHT + SOS + b"\x00" + EOI, "rejected",
     "65535 x 65535 pixels (4294836225) is above the policy's 50000000", JPEG_READER,
     "hand-made pixel flood: SOF0 of 65535 x 65535, one byte of scan")
case("jpeg_progressive_huge.jpg", SOI + DQT + sof(30000, 30000, 0xC2) + DHT + SOS + b"\x00" + EOI, "rejected",
     "30000 x 30000 pixels (900000000)", JPEG_READER,
     "hand-made: progressive SOF2 (decoders keep the whole coefficient buffer)")
case("jpeg_two_sofs.jpg", SOI + DQT + sof(8, 8) + sof(20000, 20000, 0xC1) + DHT + SOS + b"\x00" + EOI, "rejected",
     "20000 x 20000 pixels", "decoders that take the last or any SOF; the largest counts",
     "hand-made: a small SOF0 followed by a large SOF1")
case("jpeg_dnl_height0.jpg", SOI + DQT + sof(1000, 0) + DHT + SOS + b"\x00" + EOI, "rejected",
     "declares height 0 (set later by DNL): unverifiable", "decoders that honour DNL (T.81 B.2.5) and learn the height mid-scan",
     "hand-made: SOF0 with Y = 0")
case("jpeg_sos_before_sof.jpg", SOI + DQT + DHT + SOS + b"\x00" + sof(8, 8) + EOI, "rejected",
     "before any frame header (SOFn)", "every JPEG decoder (a scan needs a frame)", "hand-made")
case("jpeg_no_eoi.jpg", jpeg(8, 8)[:-2], "rejected", "without EOI",
     "viewers that show a partial scan", "hand-made: a valid JPEG without its EOI marker")
case("jpeg_truncated_segment.jpg", (SOI + JFIF + DQT)[:30], "rejected", "runs past the end of the file",
     "segment walkers that trust a length", "hand-made: a file cut inside DQT")
case("jpeg_unknown_marker.jpg", SOI + seg(0xF7, struct.pack(">BHHB", 8, 60000, 60000, 1) + b"\x01\x11\x00")
     + jpeg(8, 8)[2:], "rejected", "unknown marker 0xFFF7 at byte 2",
     "JPEG-LS decoders (CharLS) that read SOF55 (0xFFF7) sizes libjpeg would skip",
     "hand-made: a JPEG-LS frame header of 60000 x 60000 before a baseline 8 x 8 image")
# Fill bytes before markers and RST markers inside the scan, both legal (T.81 B.1.1.2, B.1.1.5).
fill = (SOI + JFIF + DQT + b"\xFF\xFF" + sof(16, 8) + seg(0xDD, b"\x00\x01") + DHT + SOS
        + b"\x00\xFF\xD0\x00" + b"\xFF\xFF" + EOI)
case("jpeg_fill_and_restart.jpg", fill, "accepted", "", JPEG_READER,
     "hand-made: DRI, RST0 inside the scan, 0xFF fill bytes before SOF0 and EOI")

# ---- GIF -------------------------------------------------------------------

LZW_1PX = b"\x02\x02\x44\x01\x00"  # min code size 2; clear, pixel 0, end


def gif(sw, sh, frames, gct=True, version=b"GIF89a", trailer=True):
    out = version + struct.pack("<HHBBB", sw, sh, 0x80 if gct else 0, 0, 0)
    if gct:
        out += b"\x00\x00\x00\xFF\xFF\xFF"
    for (x, y, w, h) in frames:
        out += b"\x21\xF9\x04\x04\x0A\x00\x00\x00"  # graphic control: 0.1 s, dispose to background
        out += b"\x2C" + struct.pack("<HHHHB", x, y, w, h, 0) + LZW_1PX
    return out + (b"\x3B" if trailer else b"")


GIF_READER = "GIF decoders (browsers, giflib, Pillow) that allocate the logical screen and each frame"
case("gif_1x1.gif", gif(1, 1, [(0, 0, 1, 1)]), "accepted", "", GIF_READER,
     "hand-made: the classic 1 x 1 GIF89a")
case("gif_87a_local_table.gif",
     b"GIF87a" + struct.pack("<HHBBB", 2, 2, 0, 0, 0) + b"\x2C" + struct.pack("<HHHHB", 0, 0, 1, 1, 0x80)
     + b"\x00\x00\x00\xFF\xFF\xFF" + LZW_1PX + b"\x3B", "accepted", "", GIF_READER,
     "hand-made: GIF87a, no global table, a local colour table")
case("gif_huge_screen.gif", gif(65535, 65535, [(0, 0, 1, 1)]), "rejected",
     "65535 x 65535 pixels (4294836225) is above the policy's 50000000", GIF_READER,
     "hand-made: logical screen of 65535 x 65535, one 1 x 1 frame")
case("gif_huge_frame.gif", gif(1, 1, [(0, 0, 60000, 60000)]), "rejected",
     "GIF frame 1 at byte 27: 60000 x 60000 pixels (3600000000)", GIF_READER,
     "hand-made: a 60000 x 60000 frame on a 1 x 1 screen")
case("gif_frame_offsets_grow_canvas.gif", gif(10, 10, [(60000, 60000, 1000, 1000)]), "rejected",
     "61000 x 61000 pixels", "GIF readers that grow the canvas to a frame that does not fit the screen",
     "hand-made: a 1000 x 1000 frame at offset 60000,60000 on a 10 x 10 screen (Pillow 9.4 opens it as 61000 x 61000)")
case("gif_many_frames.gif", gif(2000, 2000, [(0, 0, 2000, 2000)] * 101), "rejected",
     "101 frames of 2000 x 2000 pixels (404000000 in all) are above 8 x the policy's 50000000 (400000000)",
     ANIM_READER, "hand-made animation bomb: 101 frames of a 4 M-pixel canvas in a few KB")
case("gif_100_frames_at_budget.gif", gif(2000, 2000, [(0, 0, 1, 1)] * 100), "accepted", "", ANIM_READER,
     "hand-made: 100 frames on a 2000 x 2000 canvas, exactly 8 x the cap (1 x 1 frames: each is composited "
     "onto a whole canvas)")
case("gif_no_trailer.gif", gif(4, 4, [(0, 0, 4, 4)], trailer=False), "rejected", "before the trailer (0x3B)",
     "viewers that show a partial GIF", "hand-made: a GIF without its trailer")
case("gif_truncated_lzw.gif", gif(4, 4, [(0, 0, 4, 4)])[:-3], "rejected", "runs past the end of the file",
     "sub-block walkers that trust a block size", "hand-made: a GIF cut inside its LZW sub-blocks")
case("gif_bad_block.gif", gif(4, 4, [(0, 0, 4, 4)])[:-1] + b"\x00\x3B", "rejected",
     "block 0x00 at byte", "GIF decoders (an unknown block is an error)", "hand-made: a stray 0x00 block")

# ---- real-world output -----------------------------------------------------

try:
    import matplotlib
    matplotlib.use("agg")
    import matplotlib.pyplot as plt
    import io
    fig, ax = plt.subplots(figsize=(6.4, 4.8), dpi=100)
    ax.plot([0, 1, 2, 3], [1, 3, 2, 4])
    ax.set_title("throwbox corpus")
    buf = io.BytesIO()
    # No metadata: the file is the same on every run of the same matplotlib.
    fig.savefig(buf, format="png", metadata={"Software": None})
    case("matplotlib_plot.png", buf.getvalue(), "accepted", "", VIEWER,
         "real-world: matplotlib %s savefig(format='png'), 640 x 480, Agg backend" % matplotlib.__version__)
    try:
        buf = io.BytesIO()
        fig.savefig(buf, format="jpeg")
        case("matplotlib_plot.jpg", buf.getvalue(), "accepted", "", JPEG_READER,
             "real-world: matplotlib %s savefig(format='jpeg') through Pillow, 640 x 480" % matplotlib.__version__)
    except Exception as e:  # no Pillow: JPEG output is not available
        print("generate.py: no matplotlib JPEG (%s)" % e, file=sys.stderr)
    try:
        from matplotlib.animation import FuncAnimation, PillowWriter
        import tempfile
        fig2, ax2 = plt.subplots(figsize=(2, 1.5), dpi=50)
        line, = ax2.plot([], [])
        ax2.set_xlim(0, 10)
        ax2.set_ylim(0, 10)
        anim = FuncAnimation(fig2, lambda i: line.set_data(range(i + 1), range(i + 1)) or (line,), frames=10)
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "a.gif")
            anim.save(path, writer=PillowWriter(fps=5))
            with open(path, "rb") as f:
                case("matplotlib_animation.gif", f.read(), "accepted", "", ANIM_READER,
                     "real-world: matplotlib %s FuncAnimation saved with PillowWriter, 10 frames of 100 x 75"
                     % matplotlib.__version__)
    except Exception as e:
        print("generate.py: no matplotlib GIF (%s)" % e, file=sys.stderr)
except ImportError:
    print("generate.py: no matplotlib; real-world cases left out", file=sys.stderr)

with open(os.path.join(HERE, "cases.json"), "w") as f:
    json.dump(cases, f, indent=1)
    f.write("\n")

# Fuzz seeds: the first byte picks the media type (0 PNG, 1 JPEG, 2 GIF) and a cap of 50 M.
os.makedirs(SEEDS, exist_ok=True)
for name, prefix in (("png_1x1.png", 0), ("apng_two_frames.png", 0), ("jpeg_exif_thumbnail.jpg", 1),
                     ("jpeg_fill_and_restart.jpg", 1), ("gif_87a_local_table.gif", 2), ("gif_1x1.gif", 2),
                     ("matplotlib_animation.gif", 2)):
    src = os.path.join(HERE, name)
    if os.path.exists(src):
        with open(src, "rb") as f, open(os.path.join(SEEDS, os.path.splitext(name)[0]), "wb") as out:
            out.write(bytes([prefix]) + f.read())
print("generate.py: %d cases" % len(cases))
