package packaging_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/jiocloud/orchestrate/internal/paths"
	"github.com/jiocloud/orchestrate/internal/testutil"
)

// docPages lists the pages of docs/ (file names): the package ships each,
// gzipped, in paths.DocDir/docs.
func docPages(t *testing.T) []string {
	t.Helper()
	m, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(m) < 5 {
		t.Fatalf("docs/ holds only %v", m)
	}
	var pages []string
	for _, f := range m {
		pages = append(pages, filepath.Base(f))
	}
	sort.Strings(pages)
	return pages
}

// gunzip reads a gzipped file of the extracted package.
func gunzip(t *testing.T, path string) string {
	t.Helper()
	return run(t, "gzip", "-dc", path)
}

// Every document the units' Documentation= and the man pages' SEE ALSO
// name is a file the package ships, and the shipped pages are the
// repository's docs/, unchanged.
func TestNamedDocumentsAreShipped(t *testing.T) {
	testutil.RequireTool(t, "dpkg-deb", "dpkg")
	pkg, _ := packages(t)
	root := extract(t, pkg.path)
	docPath := regexp.MustCompile(regexp.QuoteMeta(paths.DocDir) + `/[^\s",]+`)
	named := map[string][]string{} // document: who names it
	for _, u := range units {
		b, err := os.ReadFile(filepath.Join(root, paths.UnitDir, u))
		if err != nil {
			t.Fatal(err)
		}
		docs := 0
		for _, l := range strings.Split(string(b), "\n") {
			doc, ok := strings.CutPrefix(l, "Documentation=")
			if !ok {
				continue
			}
			for _, uri := range strings.Fields(doc) {
				if p, ok := strings.CutPrefix(uri, "file:"); ok {
					named[p] = append(named[p], u)
					docs++
				}
			}
		}
		if docs == 0 {
			t.Errorf("%s: Documentation= names no file", u)
		}
	}
	for _, b := range binaries {
		// Roff writes a hyphen \- (and names in \fB...\fR).
		page := strings.ReplaceAll(gunzip(t, filepath.Join(root, "usr/share/man/man1", b+".1.gz")), `\-`, "-")
		_, seeAlso, ok := strings.Cut(page, ".SH SEE ALSO\n")
		if !ok {
			t.Fatalf("man page of %s has no SEE ALSO", b)
		}
		for _, p := range docPath.FindAllString(seeAlso, -1) {
			named[p] = append(named[p], b+"(1)")
		}
		if !strings.Contains(seeAlso, paths.DocDir+"/docs/") {
			t.Errorf("man page of %s names no page of docs/:\n%s", b, seeAlso)
		}
	}
	for p, by := range named {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Errorf("%v name %s, which the package does not ship", by, p)
		}
	}
	for _, f := range docPages(t) {
		want, err := os.ReadFile(filepath.Join("../docs", f))
		if err != nil {
			t.Fatal(err)
		}
		if got := gunzip(t, filepath.Join(root, paths.DocDir, "docs", f+".gz")); got != string(want) {
			t.Errorf("the package's docs/%s.gz is not docs/%s", f, f)
		}
	}
}

// orchestrate's licence is the Apache License 2.0 everywhere it is stated:
// LICENSE holds its full text (as Debian ships it), the package's copyright
// file (machine-readable, DEP-5) gives it to every file of orchestrate's, and
// the Puppet module's metadata.json names it.
func TestLicenceAgrees(t *testing.T) {
	testutil.RequireTool(t, "dpkg-deb", "dpkg")
	license, err := os.ReadFile("../LICENSE")
	if err != nil {
		t.Fatal(err)
	}
	debian, err := os.ReadFile("/usr/share/common-licenses/Apache-2.0")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(license, debian) {
		t.Error("LICENSE is not the Apache License 2.0 as /usr/share/common-licenses/Apache-2.0 holds it")
	}
	b, err := os.ReadFile(filepath.Join(moduleSource, "metadata.json"))
	if err != nil {
		t.Fatal(err)
	}
	var meta struct{ License string }
	if err := json.Unmarshal(b, &meta); err != nil {
		t.Fatalf("metadata.json: %v", err)
	}
	if meta.License != "Apache-2.0" {
		t.Errorf("metadata.json says license %q, want Apache-2.0", meta.License)
	}
	pkg, _ := packages(t)
	b, err = os.ReadFile(filepath.Join(extract(t, pkg.path), paths.DocDir, "copyright"))
	if err != nil {
		t.Fatal(err)
	}
	paras := dep5(t, string(b))
	if !strings.HasPrefix(paras[0]["Format"], "https://www.debian.org/doc/packaging-manuals/copyright-format/1.0") {
		t.Errorf("copyright: no DEP-5 Format in the header: %v", paras[0])
	}
	var files, text bool
	for _, p := range paras[1:] {
		switch {
		case p["Files"] == "*":
			files = p["License"] == "Apache-2.0" && p["Copyright"] != ""
		case strings.HasPrefix(p["License"], "Apache-2.0\n"):
			text = strings.Contains(p["License"], "/usr/share/common-licenses/Apache-2.0")
		}
	}
	if !files || !text {
		t.Errorf("copyright: Files: * under Apache-2.0 %v, its licence paragraph pointing at common-licenses %v", files, text)
	}
}

// dep5 parses a machine-readable copyright file into its paragraphs
// (field: value, continuation lines joined with "\n"), failing on a line
// that is neither a field nor a continuation.
func dep5(t *testing.T, text string) []map[string]string {
	t.Helper()
	field := regexp.MustCompile(`^([A-Za-z][A-Za-z0-9-]*):[ \t]*(.*)$`)
	var paras []map[string]string
	for i, block := range strings.Split(strings.TrimRight(text, "\n"), "\n\n") {
		p, last := map[string]string{}, ""
		for _, l := range strings.Split(block, "\n") {
			if m := field.FindStringSubmatch(l); m != nil {
				last = m[1]
				p[last] = m[2]
				continue
			}
			if last == "" || !strings.HasPrefix(l, " ") || strings.TrimSpace(l) == "" {
				t.Fatalf("copyright, paragraph %d: %q is neither a field nor a continuation line", i+1, l)
			}
			p[last] += "\n" + l[1:]
		}
		paras = append(paras, p)
	}
	if len(paras) < 3 {
		t.Fatalf("copyright has %d paragraphs", len(paras))
	}
	return paras
}

// Every relative link of the documents resolves: the file exists and, for
// path#anchor, the anchor is one of its headings as GitHub spells it.
func TestDocLinksResolve(t *testing.T) {
	docs := []string{"../README.md", "../lab/README.md", "../reaper/README.md", "../puppet/orchestrate/README.md"}
	for _, p := range docPages(t) {
		docs = append(docs, "../docs/"+p)
	}
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	for _, doc := range docs {
		text := mdText(t, doc)
		for _, m := range link.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			file := doc
			if path != "" {
				file = filepath.Join(filepath.Dir(doc), path)
			}
			if _, err := os.Stat(file); err != nil {
				t.Errorf("%s links to %s: %v", doc, target, err)
				continue
			}
			if anchor != "" && !anchors(t, file)[anchor] {
				t.Errorf("%s links to %s: %s has no heading with anchor #%s", doc, target, file, anchor)
			}
		}
	}
}

// mdText is a Markdown file without its fenced code blocks.
func mdText(t *testing.T, file string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	fenced := false
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// anchors are the anchors GitHub gives a Markdown file's headings: the
// heading's text (links and code reduced to their text) in lower case,
// every character but letters, digits, spaces, '-' and '_' dropped, spaces
// made '-'; a repeated anchor gets -1, -2, ...
func anchors(t *testing.T, file string) map[string]bool {
	t.Helper()
	heading := regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	linkText := regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
	drop := regexp.MustCompile(`[^\p{L}\p{N} _-]`)
	got := map[string]bool{}
	seen := map[string]int{}
	for _, l := range strings.Split(mdText(t, file), "\n") {
		m := heading.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		a := strings.ReplaceAll(drop.ReplaceAllString(strings.ToLower(linkText.ReplaceAllString(m[1], "$1")), ""), " ", "-")
		if n := seen[a]; n > 0 {
			got[a+"-"+strconv.Itoa(n)] = true
		} else {
			got[a] = true
		}
		seen[a]++
	}
	return got
}
