// Command rampart is Rampart's single binary: the server components
// (manager) and the verbs people type (up, down, ...). Installed as
// kubectl-rampart it is also a kubectl plugin.
package main

import (
	"os"

	"github.com/rampart-io/rampart/internal/operations/cli"
)

func main() {
	os.Exit(cli.Main(os.Args))
}
