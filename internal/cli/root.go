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
	root := NewRoot()
	// Called as kubectl-rampart, kubectl shows the plugin as "kubectl rampart".
	if strings.HasPrefix(filepath.Base(args[0]), "kubectl-") {
		root.Use = "kubectl rampart"
	}
	root.SetArgs(args[1:])
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		return 1
	}
	return 0
}

// NewRoot builds the command tree.
func NewRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "rampart",
		Short:         "Rampart defends a Kubernetes cluster against mistaken deletes, bad rollouts and runaway clients",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newUpCommand(), newDownCommand(), newManagerCommand(), newScaleCommand(), newStatusCommand(), newFlowControlCommand(), newPUBCommand(), newDrillCommand(), newGatewayCommand(), newNodeGuardCommand(), newTrafficCommand(), newEtcdCommand(), newQuotaCommand(), newExportCommand(), newTrashCommand(), newBackupCommand(), newVersionCommand())
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
