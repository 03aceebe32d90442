// Package cli holds tidegpu's cobra commands. Each command is a thin shell:
// it parses flags, checks them and calls the package that does the work.
package cli

import (
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

// Version is set at build time with -ldflags "-X ...cli.Version=v1.2.3".
var Version = ""

func version() string {
	if Version != "" {
		return Version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

// NewRootCommand returns the tidegpu command with every subcommand.
func NewRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "tidegpu",
		Short: "Keep LLM inference pools on spot capacity behind one gateway",
		Long: `TideGPU keeps a pool of inference instances (Ollama, vLLM) at its wanted size on
spot capacity, replaces reclaimed instances at once and fronts the pool with one
gateway whose backends follow the pool, so users never notice a reclaim.

Run everything on this machine:  tidegpu up
Then look:                      tidegpu status`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version(),
	}
	root.AddCommand(NewUpCommand(), NewSimCommand(), NewStatusCommand(), NewOperatorCommand(), NewGatewayCommand(), NewCostCommand(), NewReplayCommand(), NewAgentCommand(), NewKeysCommand())
	return root
}

// Execute runs the root command and returns the process exit code.
func Execute() int {
	if err := NewRootCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		return 1
	}
	return 0
}

// newLogger returns a text logger on stderr at the named level.
func newLogger(level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(strings.ToUpper(level))); err != nil {
		return nil, fmt.Errorf("--log-level: %q is not a level: use debug, info, warn or error", level)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l})), nil
}
