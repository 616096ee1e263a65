#!/usr/bin/python3
"""Every relative link of the documentation resolves (unit.docs_links).

Checks README.md, docs/*.md, bench/README.md, tests/README.md and
examples/*/README.md: each link [text](path) or [text](path#anchor) must name
a file or directory that exists, relative to the file it is in, and each
anchor (#anchor in the same file, or path.md#anchor in another) must be the
GitHub slug of a heading of that file: the heading's text lower-cased, inline
markup removed, punctuation other than '-' and '_' dropped, spaces made '-';
a repeated heading gets -1, -2, ... Links to http(s) and mailto are not
followed, and nothing inside fenced code blocks or inline code counts.

Usage: tests/docs_links.py [REPO_ROOT]   (default: the parent of tests/)
Prints each broken link as `file:line: broken link target` and exits 1, or
one line with the count of links checked and exits 0.
"""
import glob
import os
import re
import sys
from urllib.parse import unquote

FENCE = re.compile(r'^\s*(`{3,}|~{3,})')
ATX = re.compile(r'^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$')
SETEXT = re.compile(r'^ {0,3}(=+|-+)[ \t]*$')
HTML_ID = re.compile(r'<a\s[^>]*\b(?:name|id)\s*=\s*"([^"]+)"', re.I)
SCHEME = re.compile(r'^[a-zA-Z][a-zA-Z0-9+.-]*:')


def documents(root):
    names = ['README.md', 'bench/README.md', 'tests/README.md']
    names += sorted(os.path.relpath(p, root) for p in glob.glob(os.path.join(root, 'docs', '*.md')))
    names += sorted(os.path.relpath(p, root) for p in glob.glob(os.path.join(root, 'examples', '*', 'README.md')))
    return [n for n in names if os.path.isfile(os.path.join(root, n))]


def blank_code_spans(text):
    """The text with every inline code span (backticks included) made spaces; newlines kept."""
    out, i, n = [], 0, len(text)
    while i < n:
        if text[i] != '`':
            out.append(text[i])
            i += 1
            continue
        j = i
        while j < n and text[j] == '`':
            j += 1
        run = j - i
        k = j
        close = -1
        while k < n:
            if text[k] == '`':
                m = k
                while m < n and text[m] == '`':
                    m += 1
                if m - k == run:
                    close = m
                    break
                k = m
            else:
                k += 1
        if close < 0:  # an unmatched run is literal text
            out.append(text[i:j])
            i = j
            continue
        out.append(''.join('\n' if c == '\n' else ' ' for c in text[i:close]))
        i = close
    return ''.join(out)


def blocks(lines):
    """(first line number, [lines]) of each run of non-blank lines outside fenced code."""
    fence = None
    current, start = [], 0
    for number, line in enumerate(lines, 1):
        m = FENCE.match(line)
        if fence:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) and not line.strip()[len(m.group(1)):].strip():
                fence = None
            continue
        if m:
            if current:
                yield start, current
                current = []
            fence = m.group(1)
            continue
        if line.strip():
            if not current:
                start = number
            current.append(line)
        elif current:
            yield start, current
            current = []
    if current:
        yield start, current


def heading_text(raw):
    text = blank_code_spans_keep(raw)
    text = re.sub(r'!?\[([^\]]*)\]\([^)]*\)', r'\1', text)  # links and images: their text
    text = re.sub(r'<[^>]+>', '', text)  # inline HTML
    return text


def blank_code_spans_keep(text):
    """Inline code spans with their backticks removed, contents kept (as GitHub renders a heading)."""
    return re.sub(r'(`+)(.+?)\1', lambda m: m.group(2).strip(' ') if m.group(2).strip() else m.group(2), text)


def slug(text):
    text = heading_text(text).strip().lower()
    text = re.sub(r'[^\w\- ]', '', text)  # \w keeps letters, digits and '_'
    return text.replace(' ', '-')


def anchors_of(path, cache):
    if path in cache:
        return cache[path]
    with open(path, encoding='utf-8') as f:
        lines = f.read().split('\n')
    found, seen = set(), {}

    def add(base):
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else '%s-%d' % (base, n))

    fence = None
    previous = ''
    for line in lines:
        m = FENCE.match(line)
        if fence:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
                fence = None
            previous = ''
            continue
        if m:
            fence = m.group(1)
            previous = ''
            continue
        h = ATX.match(line)
        if h:
            add(slug(h.group(2) or ''))
            previous = ''
            continue
        s = SETEXT.match(line)
        if s and previous.strip() and not previous.lstrip().startswith(('|', '-', '*', '>')) and not ATX.match(previous):
            add(slug(previous))
            previous = ''
            continue
        for a in HTML_ID.findall(line):
            found.add(a)
        previous = line
    cache[path] = found
    return found


def links_in(text):
    """(offset, target) of each inline link [text](target) in text (code spans already blanked)."""
    i = 0
    while True:
        i = text.find('](', i)
        if i < 0:
            return
        if '[' not in text[:i]:
            i += 2
            continue
        j, depth = i + 2, 1
        while j < len(text) and depth:
            if text[j] == '(':
                depth += 1
            elif text[j] == ')':
                depth -= 1
            j += 1
        if depth:
            return
        inner = text[i + 2:j - 1].strip()
        if inner.startswith('<') and '>' in inner:
            target = inner[1:inner.index('>')]
        else:
            target = inner.split()[0] if inner.split() else ''
        yield i, target
        i = j


def check(root):
    broken, checked, cache = [], 0, {}
    for name in documents(root):
        path = os.path.join(root, name)
        with open(path, encoding='utf-8') as f:
            lines = f.read().split('\n')
        for start, block in blocks(lines):
            text = blank_code_spans('\n'.join(block))
            for offset, target in links_in(text):
                line = start + text.count('\n', 0, offset)
                if not target or SCHEME.match(target):
                    continue  # http(s), mailto and other schemes are not followed
                checked += 1
                file_part, _, anchor = target.partition('#')
                dest = os.path.normpath(os.path.join(os.path.dirname(path), unquote(file_part))) if file_part else path
                if not os.path.exists(dest):
                    broken.append('%s:%d: broken link %s' % (name, line, target))
                    continue
                if anchor and os.path.isfile(dest) and dest.endswith('.md'):
                    if unquote(anchor) not in anchors_of(dest, cache):
                        broken.append('%s:%d: broken link %s' % (name, line, target))
    return broken, checked


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), '..'))
    broken, checked = check(root)
    for b in broken:
        print(b)
    if broken:
        print('docs_links: %d of %d links broken' % (len(broken), checked), file=sys.stderr)
        return 1
    print('docs_links: %d links in %d files, all resolve' % (checked, len(documents(root))))
    return 0


if __name__ == '__main__':
    sys.exit(main())
