package cli_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/rampart-io/rampart/internal/operations/cli"
)

// The help a user reads names the command as they type it: "kubectl
// rampart" when run as the kubectl plugin, "rampart" otherwise.
func TestHelpNamesTheCommandAsTyped(t *testing.T) {
	for _, tc := range []struct {
		argv0 string
		args  []string
		want  []string
		not   string
	}{
		{argv0: "/usr/local/bin/kubectl-rampart", args: []string{"--help"},
			want: []string{"  kubectl rampart [command]", `Use "kubectl rampart [command] --help"`}, not: "kubectl [command]"},
		{argv0: "kubectl-rampart", args: []string{"scale", "--help"},
			want: []string{"  kubectl rampart scale KIND/NAME --replicas N"}},
		{argv0: "kubectl-rampart", args: []string{"gateway", "breaker", "--help"},
			want: []string{"  kubectl rampart gateway breaker [command]"}},
		{argv0: "bin/rampart", args: []string{"--help"},
			want: []string{"  rampart [command]", `Use "rampart [command] --help"`}, not: "kubectl"},
	} {
		root := cli.NewRootAs(tc.argv0)
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&out)
		root.SetArgs(tc.args)
		if err := root.Execute(); err != nil {
			t.Fatalf("%s %v: %v", tc.argv0, tc.args, err)
		}
		for _, w := range tc.want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("%s %v: help lacks %q:\n%s", tc.argv0, tc.args, w, out.String())
			}
		}
		if tc.not != "" && strings.Contains(out.String(), tc.not) {
			t.Errorf("%s %v: help has %q:\n%s", tc.argv0, tc.args, tc.not, out.String())
		}
	}
}
