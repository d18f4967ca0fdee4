"""English text corpus from the Debian package `sqlite3-doc` (public domain).

The HTML pages under /usr/share/doc/sqlite3 are turned into plain text
(navigation boxes, scripts and styles dropped; block tags become line breaks;
<pre> keeps its layout) and split deterministically into a training part and
a held-out part (whole documents, chosen by a CRC of their path).
"""
import glob
import html.parser
import os
import re
import zlib

DOC_DIR = "/usr/share/doc/sqlite3"
DEBIAN_PACKAGE = "sqlite3-doc"
LICENSE = "public-domain (SQLite documentation, D. Richard Hipp; see /usr/share/doc/sqlite3-doc/copyright)"

BLOCK = {"p", "div", "br", "h1", "h2", "h3", "h4", "h5", "h6", "li", "tr", "pre", "table",
         "dt", "dd", "ul", "ol", "dl", "blockquote", "hr", "title", "center", "td", "th"}
SKIP = {"script", "style", "head", "noscript"}


class _TextExtractor(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.out = []
        self.skip = 0  # inside script/style/head
        self.div_depth = 0
        self.nav_depth = None  # div depth at which a navigation box started
        self.pre = 0

    def handle_starttag(self, tag, attrs):
        if tag in SKIP:
            self.skip += 1
            return
        if tag == "div":
            self.div_depth += 1
            cls = dict(attrs).get("class") or ""
            if self.nav_depth is None and ("nosearch" in cls or "rightsidebar" in cls
                                           or "menu" in cls):
                self.nav_depth = self.div_depth
        if tag == "pre":
            self.pre += 1
        if tag in BLOCK:
            self.out.append("\n")
        if tag == "td":
            self.out.append(" ")

    def handle_endtag(self, tag):
        if tag in SKIP:
            self.skip = max(0, self.skip - 1)
            return
        if tag == "div":
            if self.nav_depth is not None and self.div_depth == self.nav_depth:
                self.nav_depth = None
            self.div_depth = max(0, self.div_depth - 1)
        if tag == "pre":
            self.pre = max(0, self.pre - 1)
        if tag in BLOCK:
            self.out.append("\n")

    def handle_data(self, data):
        if self.skip or self.nav_depth is not None:
            return
        if self.pre:
            self.out.append(data.replace("\r", ""))
        else:
            self.out.append(re.sub(r"\s+", " ", data))


def html_to_text(raw):
    p = _TextExtractor()
    p.feed(raw)
    p.close()
    text = "".join(p.out)
    lines = [ln.rstrip() for ln in text.split("\n")]
    text = "\n".join(lines)
    text = re.sub(r"\n{3,}", "\n\n", text)
    # lines that are only whitespace-collapsed leftovers start with a space
    text = re.sub(r"\n +", "\n", text)
    return text.strip() + "\n"


def load_documents(doc_dir=DOC_DIR):
    paths = sorted(glob.glob(os.path.join(doc_dir, "**", "*.html"), recursive=True))
    if not paths:
        raise SystemExit(f"no HTML under {doc_dir}: apt-get install -y {DEBIAN_PACKAGE}")
    docs = []
    for p in paths:
        with open(p, encoding="utf-8", errors="replace") as f:
            t = html_to_text(f.read())
        if len(t) > 200:
            docs.append((os.path.relpath(p, doc_dir), t))
    return docs


def split_documents(docs, heldout_bytes=40_000, modulus=29):
    """Whole documents go to held-out when crc32(path) % modulus == 0, until
    the held-out text reaches `heldout_bytes`; all others are training text."""
    train, held, held_names, n = [], [], [], 0
    for name, t in docs:
        if n < heldout_bytes and zlib.crc32(name.encode()) % modulus == 0 and len(t) < 20_000:
            held.append(t)
            held_names.append(name)
            n += len(t.encode("utf-8"))
        else:
            train.append(t)
    return train, held, held_names
