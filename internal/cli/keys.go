package cli

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tidegpu/tidegpu/internal/tenant"
)

const keysFileUsage = "YAML file of API keys (SHA-256 digests, tenants, allowed models and pools, limits) the gateway requires, re-read when it changes; without it every request is served without a key"

// loadKeys reads --keys-file, and returns the reloader that follows its
// changes while running; an empty path means no keys.
func loadKeys(path string, logger *slog.Logger) (*tenant.Keys, *tenant.Reloader, error) {
	if path == "" {
		return nil, nil, nil
	}
	r := tenant.NewReloader("--keys-file", path, logger)
	ks, err := r.Load()
	if err != nil {
		return nil, nil, err
	}
	return ks, r, nil
}

// NewKeysCommand returns `tidegpu keys`.
func NewKeysCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "keys",
		Short: "Work with the gateway's API keys",
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "hash",
		Short: "Print the SHA-256 digest of the key read from standard input, for the keys file",
		Long: `Read one API key from standard input (one line) and print its hex SHA-256,
the form the keys file (--keys-file) holds. The key is not given as an
argument, so that it stays out of the shell history and the process list.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			key, err := readKey(cmd.InOrStdin())
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), tenant.Hash(key))
			return nil
		},
	})
	return cmd
}

// readKey reads the first line of r, without its line end.
func readKey(r io.Reader) (string, error) {
	line, err := bufio.NewReader(io.LimitReader(r, 4096)).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("reading the key from standard input: %w", err)
	}
	key := strings.TrimRight(line, "\r\n")
	if strings.TrimSpace(key) == "" {
		return "", errors.New("no key on standard input: pipe it in, e.g. `printf %s \"$KEY\" | tidegpu keys hash`")
	}
	return key, nil
}
