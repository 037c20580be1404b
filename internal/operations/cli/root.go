// Package cli holds the rampart command tree. Each verb is a thin shell over
// the package that does the work.
package cli

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
)

// Main runs the command named by args and returns the exit code.
func Main(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := NewRootAs(args[0])
	root.SetArgs(args[1:])
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		return 1
	}
	return 0
}

// NewRootAs builds the command tree for the program named argv0. Called as
// kubectl-rampart, help and usage name it as its user types it, "kubectl
// rampart" (kubectl's plugin convention): the root keeps the name
// "rampart", so that cobra still finds its subcommands and usage line, and
// only displays the other.
func NewRootAs(argv0 string) *cobra.Command {
	root := NewRoot()
	if strings.HasPrefix(filepath.Base(argv0), "kubectl-") {
		root.Annotations = map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl rampart"}
	}
	return root
}

// NewRoot builds the command tree.
func NewRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "rampart",
		Short:         "Rampart defends a Kubernetes cluster against mistaken deletes, bad rollouts and runaway clients",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newUpCommand(), newDownCommand(), newManagerCommand(), newScaleCommand(), newStatusCommand(), newFlowControlCommand(), newPUBCommand(), newDrillCommand(), newGatewayCommand(), newNodeGuardCommand(), newTrafficCommand(), newAPFCommand(), newEtcdCommand(), newQuotaCommand(), newExportCommand(), newTrashCommand(), newBackupCommand(), newVersionCommand())
	return root
}

// Version is set at build time with -ldflags "-X .../cli.Version=...".
var Version = "dev"

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintln(cmd.OutOrStdout(), "rampart", Version)
		},
	}
}
