package docs

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// root is the repository, seen from this package's folder.
const root = ".."

// docsPages are the pages of docs/, seen from the repository.
func docsPages(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) == 0 {
		t.Fatal("no docs/*.md found")
	}
	for i, d := range docs {
		docs[i] = filepath.Join(root, "docs", d)
	}
	return docs
}

// pages are the Markdown files whose links are checked: the README, the
// chart's and every page of docs/.
func pages(t *testing.T) []string {
	t.Helper()
	return append([]string{filepath.Join(root, "README.md"), filepath.Join(root, "charts/rampart/README.md")}, docsPages(t)...)
}

// page is a Markdown file read for its links and anchors.
type page struct {
	// text is the file with fenced code blocks and code spans blanked
	// out (newlines kept, so offsets still give line numbers).
	text    string
	anchors map[string]bool
}

var (
	headingRE = regexp.MustCompile(`^ {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$`)
	// linkRE: an inline link or image, [text](target "title"); the text
	// may span lines.
	linkRE     = regexp.MustCompile(`!?\[([^\]]*)\]\(\s*<?([^)\s>]*)>?(?:\s+"[^"]*")?\s*\)`)
	htmlIDRE   = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)
	inlineRE   = regexp.MustCompile("!?\\[([^\\]]*)\\]\\([^)]*\\)|[`*]")
	schemeRE   = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
	slugDropRE = regexp.MustCompile(`[^\p{L}\p{M}\p{N}\p{Pc} -]`)
)

// slug is GitHub's anchor for a heading's text: lower case, every
// character but letters, digits, "_", "-" and spaces dropped, each space a
// "-".
func slug(heading string) string {
	s := inlineRE.ReplaceAllString(heading, "$1")
	s = strings.ToLower(strings.TrimSpace(s))
	s = slugDropRE.ReplaceAllString(s, "")
	return strings.ReplaceAll(s, " ", "-")
}

// fenced says which lines are in a fenced code block, fences included: a
// line whose first non-blank characters are ``` or ~~~ opens a block that
// the next such line of the same character closes.
func fenced(lines []string) []bool {
	in := make([]bool, len(lines))
	fence := byte(0)
	for i, l := range lines {
		l = strings.TrimLeft(l, " \t")
		if strings.HasPrefix(l, "```") || strings.HasPrefix(l, "~~~") {
			switch fence {
			case 0:
				fence = l[0]
			case l[0]:
				fence = 0
				in[i] = true
			}
		}
		in[i] = in[i] || fence != 0
	}
	return in
}

// blankCode returns text with fenced code blocks and code spans replaced
// by spaces, newlines kept.
func blankCode(text string) string {
	b := []byte(text)
	blank := func(from, to int) {
		for i := from; i < to; i++ {
			if b[i] != '\n' {
				b[i] = ' '
			}
		}
	}
	lines := strings.Split(text, "\n")
	off := 0
	for i, in := range fenced(lines) {
		if in {
			blank(off, off+len(lines[i]))
		}
		off += len(lines[i]) + 1
	}
	// Code spans: a run of n backticks up to the next run of exactly n,
	// within one paragraph.
	s := string(b)
	ticks := func(i int) int { return len(s[i:]) - len(strings.TrimLeft(s[i:], "`")) }
	for i := 0; i < len(s); {
		n := ticks(i)
		if n == 0 {
			i++
			continue
		}
		end := i + n
		for j := end; j < len(s) && !strings.HasPrefix(s[j:], "\n\n"); {
			m := ticks(j)
			if m == n {
				blank(i, j+m)
				end = j + m
				break
			}
			j += max(m, 1)
		}
		i = end
	}
	return string(b)
}

func load(t *testing.T, file string) *page {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	p := &page{text: blankCode(string(raw)), anchors: map[string]bool{}}
	seen := map[string]int{}
	lines := strings.Split(string(raw), "\n")
	for i, in := range fenced(lines) {
		if in {
			continue // a "#" in a code block is no heading
		}
		for _, m := range htmlIDRE.FindAllStringSubmatch(lines[i], -1) {
			p.anchors[m[1]] = true
		}
		m := headingRE.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		// A repeated heading gets -1, -2, ... as GitHub numbers them.
		a := slug(m[2])
		if n := seen[a]; n > 0 {
			a += "-" + strconv.Itoa(n)
		}
		seen[slug(m[2])]++
		p.anchors[a] = true
	}
	return p
}

// link is a link's target and where it is.
type link struct {
	target string
	line   int
}

// links are the inline links and images of file, outside code.
func links(t *testing.T, file string) []link {
	t.Helper()
	text := load(t, file).text
	var ls []link
	for _, m := range linkRE.FindAllStringSubmatchIndex(text, -1) {
		ls = append(ls, link{text[m[4]:m[5]], 1 + strings.Count(text[:m[0]], "\n")})
	}
	return ls
}

// repoURL is where this repository's files are read on GitHub, from the
// chart's home: links and runbook URLs under it are checked as files of
// this tree.
func repoURL(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, "charts/rampart/Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var chart struct{ Home string }
	if err := yaml.Unmarshal(raw, &chart); err != nil || chart.Home == "" {
		t.Fatalf("charts/rampart/Chart.yaml: no home (%v)", err)
	}
	return strings.TrimSuffix(chart.Home, "/") + "/blob/main/"
}

// resolve checks target, a link found in from (a file, or "" for a path
// from the repository's root), and says what is wrong with it, or "".
func resolve(t *testing.T, from, target, repo string) string {
	path, anchor, _ := strings.Cut(target, "#")
	switch {
	case strings.HasPrefix(path, repo):
		path = filepath.Join(root, filepath.FromSlash(strings.TrimPrefix(path, repo)))
	case schemeRE.MatchString(target) || strings.HasPrefix(target, "//"):
		return "" // elsewhere on the web: not checked
	case path == "":
		path = from
	case strings.HasPrefix(path, "/"):
		return "an absolute path: GitHub resolves it against its own site, write it relative to the file"
	default:
		path = filepath.Join(filepath.Dir(from), filepath.FromSlash(path))
	}
	info, err := os.Stat(path)
	if err != nil {
		return "no such file " + path
	}
	if anchor == "" {
		return ""
	}
	if info.IsDir() || !strings.HasSuffix(path, ".md") {
		return "an anchor into " + path + ", which is not a Markdown file"
	}
	if !load(t, path).anchors[anchor] {
		return "no heading in " + path + " has the anchor #" + anchor
	}
	return ""
}

func TestLinksAndAnchorsResolve(t *testing.T) {
	repo := repoURL(t)
	found := 0
	for _, file := range pages(t) {
		for _, l := range links(t, file) {
			found++
			if problem := resolve(t, file, l.target, repo); problem != "" {
				t.Errorf("%s:%d: link %q: %s", file, l.line, l.target, problem)
			}
		}
	}
	if found == 0 {
		t.Fatal("no links found: the scan is broken")
	}
}

func TestEveryDocsPageIsLinkedFromTheReadme(t *testing.T) {
	linked := map[string]bool{}
	for _, l := range links(t, filepath.Join(root, "README.md")) {
		path, _, _ := strings.Cut(l.target, "#")
		linked[path] = true
	}
	for _, file := range docsPages(t) {
		if rel := "docs/" + filepath.Base(file); !linked[rel] {
			t.Errorf("README.md does not link %s: add it to \"Where to read more\"", rel)
		}
	}
}

// TestTheReadmeIsShort: the README is what a new user reads in five
// minutes; figures and how-tos belong on the docs pages it links.
func TestTheReadmeIsShort(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(data, []byte("\n")); n >= 300 {
		t.Errorf("README.md has %d lines, want under 300: move the detail to the docs page it belongs to", n)
	}
}

// TestRunbookURLsResolve: every alert of the chart has a runbook_url, and
// it names the section of docs/runbooks.md headed with the alert's name.
func TestRunbookURLsResolve(t *testing.T) {
	repo := repoURL(t)
	const alerts = "charts/rampart/files/alerts.yaml"
	raw, err := os.ReadFile(filepath.Join(root, alerts))
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert       string
				Annotations map[string]string
			}
		}
	}
	if err := yaml.Unmarshal(raw, &rules); err != nil {
		t.Fatalf("%s: %v", alerts, err)
	}
	var names []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			names = append(names, r.Alert)
			url := r.Annotations["runbook_url"]
			want := repo + "docs/runbooks.md#" + slug(r.Alert)
			switch {
			case url == "":
				t.Errorf("%s: alert %s has no runbook_url annotation (want %s, and a section %q in docs/runbooks.md)", alerts, r.Alert, want, "## "+r.Alert)
			case url != want:
				t.Errorf("%s: alert %s: runbook_url %s, want %s", alerts, r.Alert, url, want)
			}
			if problem := resolve(t, "", url, repo); url != "" && problem != "" {
				t.Errorf("%s: alert %s: runbook_url %s: %s", alerts, r.Alert, url, problem)
			}
		}
	}
	if len(names) == 0 {
		t.Fatalf("%s: no alerts found", alerts)
	}
	// And no section of the runbooks is left for an alert that is gone.
	text, err := os.ReadFile(filepath.Join(root, "docs/runbooks.md"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(text), "\n")
	for i, in := range fenced(lines) {
		if name, ok := strings.CutPrefix(lines[i], "## "); ok && !in && !slices.Contains(names, name) {
			t.Errorf("docs/runbooks.md:%d: section %q names no alert of %s", i+1, name, alerts)
		}
	}
}

func TestSlugLikeGitHub(t *testing.T) {
	for heading, want := range map[string]string{
		"Everyday operations, timed: does Rampart slow the cluster's own healing?": "everyday-operations-timed-does-rampart-slow-the-clusters-own-healing",
		"`rampart node-guard` (in progress)":                                       "rampart-node-guard-in-progress",
		"The recycle bin and `rampart trash`":                                      "the-recycle-bin-and-rampart-trash",
		"Install in a cluster (Helm)":                                              "install-in-a-cluster-helm",
		"[Linked](elsewhere.md) and **bold**":                                      "linked-and-bold",
		"snake_case -- kept":                                                       "snake_case----kept",
		"RampartQuotaAtLimit":                                                      "rampartquotaatlimit",
	} {
		if got := slug(heading); got != want {
			t.Errorf("slug(%q) = %q, want %q", heading, got, want)
		}
	}
}
