package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tidegpu/tidegpu/internal/engine"
)

// NewStatusCommand returns `tidegpu status`.
func NewStatusCommand() *cobra.Command {
	var (
		adminURL, output string
		watch            time.Duration
	)
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show pools and their instances",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "table" && output != "json" {
				return fmt.Errorf("--output: %q is not supported: use table or json", output)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt)
			defer stop()
			token := os.Getenv("TIDEGPU_ADMIN_TOKEN")
			for {
				pools, err := fetchPools(ctx, adminURL, token)
				if err != nil {
					return err
				}
				if watch > 0 && output == "table" {
					fmt.Fprint(cmd.OutOrStdout(), "\033[H\033[2J")
				}
				if output == "json" {
					enc := json.NewEncoder(cmd.OutOrStdout())
					enc.SetIndent("", "  ")
					if err := enc.Encode(pools); err != nil {
						return err
					}
				} else {
					writeStatusTable(cmd.OutOrStdout(), pools, time.Now())
				}
				if watch <= 0 {
					return nil
				}
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(watch):
				}
			}
		},
	}
	f := cmd.Flags()
	f.StringVar(&adminURL, "admin", "http://127.0.0.1:9090", "admin API of `tidegpu up` (token from TIDEGPU_ADMIN_TOKEN)")
	f.StringVarP(&output, "output", "o", "table", "table or json")
	f.DurationVarP(&watch, "watch", "w", 0, "refresh every this long (e.g. 1s) until interrupted")
	return cmd
}

func fetchPools(ctx context.Context, base, token string) ([]engine.PoolView, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(base, "/")+"/api/v1/pools", nil)
	if err != nil {
		return nil, fmt.Errorf("--admin %q: %w", base, err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("reaching the admin API at %s: %w (is `tidegpu up` running? set --admin)", base, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if resp.StatusCode == http.StatusUnauthorized {
		return nil, fmt.Errorf("the admin API at %s wants a token: set TIDEGPU_ADMIN_TOKEN", base)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("admin API %s: %s: %s", base, resp.Status, strings.TrimSpace(string(body)))
	}
	var pools []engine.PoolView
	if err := json.Unmarshal(body, &pools); err != nil {
		return nil, fmt.Errorf("admin API %s: decoding pools: %w", base, err)
	}
	return pools, nil
}

// writeStatusTable prints pools, then their instances, as aligned tables.
func writeStatusTable(w io.Writer, pools []engine.PoolView, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POOL\tPROVIDER\tDESIRED\tREADY\tSPOT\tMIN\tMAX\tCONDITION")
	for _, p := range pools {
		cond := "-"
		for _, c := range p.Status.Conditions {
			if c.Type == "Ready" {
				cond = fmt.Sprintf("Ready=%s (%s)", c.Status, c.Message)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\n", p.Name, p.Spec.Provider, p.Status.Desired, p.Status.Ready,
			p.Status.Spot, p.Spec.Minimum, p.Spec.Maximum, cond)
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POOL\tINSTANCE\tPHASE\tADDRESS\tZONE\tMARKET\tAGE")
	for _, p := range pools {
		for _, in := range p.Status.Instances {
			age := "-"
			if !in.LaunchedAt.IsZero() {
				age = shortDuration(now.Sub(in.LaunchedAt.Time))
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.Name, in.ID, in.Phase, dash(in.Address), dash(in.Zone), dash(in.Market), age)
		}
	}
	tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func shortDuration(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%dm", int(d.Hours()), int(d.Minutes())%60)
	default:
		return fmt.Sprintf("%dd", int(d.Hours()/24))
	}
}
