// Package internal_test holds the test of the tree's layers: the layers
// docs/architecture.md draws ("The tree"), each importing only its own
// and lower ones. Test files may import anything (an admission test
// starts a local cluster).
package internal_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/rampart-io/rampart/"

// layers are the layers of internal/, lowest first; a package is on the
// layer of the longest prefix that names it.
var layers = []struct {
	name     string
	prefixes []string
}{
	{"plumbing", []string{"internal/plumbing"}},
	{"decisions and operations libraries", []string{"internal/protection", "internal/operations/backup", "internal/operations/restore",
		"internal/operations/etcdtool", "internal/operations/trafficprofile", "internal/operations/apf", "internal/operations/quota"}},
	{"admission adapters, registrar, cluster views", []string{"internal/protection/admission", "internal/protection/registrar",
		"internal/protection/clusterview", "internal/protection/ready", "internal/protection/protections"}},
	{"servers", []string{"internal/servers"}},
	{"drills and the local cluster", []string{"internal/operations/drill", "internal/operations/localcluster"}},
	{"command line", []string{"internal/operations/cli"}},
}

// adapters is the layer of a protection's admit package
// (internal/protection/NAME/admit: its webhooks, handler and Ready).
const adapters = 2

// layerOf is pkg's layer (its index in layers), -1 outside internal/.
func layerOf(pkg string) int {
	if strings.HasPrefix(pkg, "internal/protection/") && strings.HasSuffix(pkg, "/admit") {
		return adapters
	}
	best, bestLen := -1, 0
	for i, l := range layers {
		for _, p := range l.prefixes {
			if (pkg == p || strings.HasPrefix(pkg, p+"/")) && len(p) > bestLen {
				best, bestLen = i, len(p)
			}
		}
	}
	return best
}

func TestNoPackageImportsAHigherLayer(t *testing.T) {
	fset := token.NewFileSet()
	seen := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		pkg := "internal/" + filepath.ToSlash(filepath.Dir(path))
		from := layerOf(pkg)
		if from < 0 {
			t.Errorf("%s is on no layer: put it under servers/, protection/, operations/ or plumbing/ and name its layer here and in docs/architecture.md", pkg)
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		seen++
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			dep, ok := strings.CutPrefix(p, module)
			if !ok || !strings.HasPrefix(dep, "internal/") {
				continue
			}
			if to := layerOf(dep); to > from {
				t.Errorf("%s (%s) imports %s (%s), a higher layer", path, layers[from].name, dep, layers[to].name)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen < 100 {
		t.Fatalf("read %d files: the walk missed the tree", seen)
	}
}
