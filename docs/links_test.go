// Package docs holds pdgate's user documentation. Its tests keep the documentation true:
// every relative link in docs/ and in the repository's READMEs must resolve to a file, and
// every #anchor to a heading of that file.
package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var (
	mdLink  = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	heading = regexp.MustCompile(`(?m)^#{1,6}\s+(.+?)\s*#*\s*$`)
	fence   = regexp.MustCompile("(?ms)^```.*?^```")
)

// anchorOf renders a heading the way GitHub does: lower case, punctuation dropped, spaces to '-'.
func anchorOf(h string) string {
	h = strings.ToLower(strings.TrimSpace(h))
	var b strings.Builder
	for _, r := range h {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func anchors(t *testing.T, path string) map[string]bool {
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	text := fence.ReplaceAllString(string(data), "")
	out := map[string]bool{}
	for _, m := range heading.FindAllStringSubmatch(text, -1) {
		a := anchorOf(strings.ReplaceAll(m[1], "`", ""))
		for i := 0; ; i++ { // GitHub suffixes duplicate anchors with -1, -2, ...
			key := a
			if i > 0 {
				key = a + "-" + string(rune('0'+i))
			}
			if !out[key] {
				out[key] = true
				break
			}
		}
	}
	return out
}

func markdownFiles(t *testing.T, root string) []string {
	var files []string
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "bin" || d.Name() == ".git" || d.Name() == "testdata" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func TestRelativeLinksResolve(t *testing.T) {
	root, _ := filepath.Abs("..")
	for _, file := range markdownFiles(t, root) {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		text := fence.ReplaceAllString(string(data), "")
		for _, m := range mdLink.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			rel, _ := filepath.Rel(root, file)
			path, frag, _ := strings.Cut(target, "#")
			dest := file
			if path != "" {
				dest = filepath.Join(filepath.Dir(file), path)
				if _, err := os.Stat(dest); err != nil {
					t.Errorf("%s: link %q: %s does not exist", rel, target, path)
					continue
				}
			}
			if frag != "" && strings.HasSuffix(dest, ".md") && !anchors(t, dest)[frag] {
				t.Errorf("%s: link %q: no heading with anchor #%s", rel, target, frag)
			}
		}
	}
}
