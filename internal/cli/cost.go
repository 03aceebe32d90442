package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tidegpu/tidegpu/internal/admin"
	"github.com/tidegpu/tidegpu/internal/cost"
)

// NewCostCommand returns `tidegpu cost`.
func NewCostCommand() *cobra.Command {
	var adminURL, window, output, by string
	cmd := &cobra.Command{
		Use:   "cost",
		Short: "Show what each pool spends and saves: spend, run-rate, on-demand equivalent, savings, idle, $/Mtok",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := admin.ParseWindow(window); err != nil {
				return fmt.Errorf("--%v", err)
			}
			if _, err := cost.ParseGroupBy(by); err != nil {
				return err
			}
			format := "json"
			switch output {
			case "table", "json":
			case "focus-csv":
				format = "focus-csv"
			default:
				return fmt.Errorf("--output: %q is not supported: use table, json or focus-csv", output)
			}
			body, err := getAdmin(cmd.Context(), adminURL, "/api/v1/cost?window="+url.QueryEscape(window)+"&format="+format+"&by="+url.QueryEscape(by))
			if err != nil {
				return err
			}
			if output != "table" {
				_, err := cmd.OutOrStdout().Write(body)
				return err
			}
			var rep admin.CostReport
			if err := json.Unmarshal(body, &rep); err != nil {
				return fmt.Errorf("decoding the cost report: %w", err)
			}
			if rep.By != "" {
				writeGroupTable(cmd.OutOrStdout(), rep)
				return nil
			}
			writeCostTable(cmd.OutOrStdout(), rep)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&adminURL, "admin", "http://127.0.0.1:9090", "admin API of `tidegpu up` or the operator (token from TIDEGPU_ADMIN_TOKEN)")
	f.StringVar(&window, "window", "24h", "how far back: a duration such as 1h, 24h or 720h")
	f.StringVarP(&output, "output", "o", "table", "table, json or focus-csv (FOCUS 1.0 columns)")
	f.StringVar(&by, "by", "pool", "group by pool, tenant, label:team, label:project or label:env (tenants pay for the GPU time their requests used; idle apart)")
	return cmd
}

// getAdmin GETs path from the admin API with the token from the environment.
func getAdmin(ctx context.Context, base, path string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(base, "/")+path, nil)
	if err != nil {
		return nil, fmt.Errorf("--admin %q: %w", base, err)
	}
	if tok := os.Getenv("TIDEGPU_ADMIN_TOKEN"); tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("reaching the admin API at %s: %w (is `tidegpu up` running? set --admin)", base, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	switch {
	case resp.StatusCode == http.StatusUnauthorized:
		return nil, fmt.Errorf("the admin API at %s wants a token: set TIDEGPU_ADMIN_TOKEN", base)
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("admin API %s: %s: %s", base, resp.Status, strings.TrimSpace(string(body)))
	}
	return body, nil
}

// writeCostTable prints the report as a table, then $/Mtok per model.
func writeCostTable(w io.Writer, rep admin.CostReport) {
	fmt.Fprintf(w, "Cost from %s to %s\n\n", rep.From.Local().Format("2006-01-02 15:04"), rep.To.Local().Format("2006-01-02 15:04"))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "POOL\tSPEND\tRUN-RATE/H\tON-DEMAND EQUIV\tSAVINGS\tSAVED %\tIDLE\tINSTANCE-H\tPRICES FROM\t")
	for _, p := range rep.Pools {
		saved := 0.0
		if p.OnDemandEquivalent > 0 {
			saved = 100 * p.Savings / p.OnDemandEquivalent
		}
		var src []string
		for s, v := range p.SpendBySource {
			if v > 0 {
				src = append(src, s)
			}
		}
		fmt.Fprintf(tw, "%s\t%.2f %s\t%.2f\t%.2f\t%.2f\t%.0f%%\t%.2f\t%.2f\t%s\t\n", p.Name, p.Spend, p.Currency, p.RunRatePerHour,
			p.OnDemandEquivalent, p.Savings, saved, p.IdleCost, p.InstanceHours, dash(strings.Join(src, ",")))
	}
	tw.Flush()
	for _, p := range rep.Pools {
		if p.ZeroHours > 0 {
			fmt.Fprintf(w, "%s: %.2f h at zero instances, %.2f %s saved against keeping one\n", p.Name, p.ZeroHours, p.ZeroSavings, p.Currency)
		}
	}
	var rows []string
	for _, p := range rep.Pools {
		for _, t := range p.CostPerMillionTokens {
			rows = append(rows, fmt.Sprintf("%s\t%s\t%s\t%.4f %s\t%.0f\t", p.Name, t.Model, t.Basis, t.Value, p.Currency, t.Tokens))
		}
	}
	if len(rows) == 0 {
		fmt.Fprintln(w, "\nno tokens served in this window: $/Mtok not available")
		return
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POOL\tMODEL\tBASIS\t$/MTOK\tTOKENS\t")
	for _, r := range rows {
		fmt.Fprintln(tw, r)
	}
	tw.Flush()
}

// writeGroupTable prints the cost per tenant or label value: spend, tokens,
// GPU-hours and $/Mtok, then the total.
func writeGroupTable(w io.Writer, rep admin.CostReport) {
	fmt.Fprintf(w, "Cost by %s from %s to %s (usage basis: each tenant pays for the GPU time its requests used)\n\n",
		rep.By, rep.From.Local().Format("2006-01-02 15:04"), rep.To.Local().Format("2006-01-02 15:04"))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%s\tSPEND\tPROMPT TOK\tCOMPLETION TOK\tGPU-H\t$/MTOK\t\n", strings.ToUpper(strings.TrimPrefix(rep.By, "label:")))
	totals := map[string]float64{}
	for _, g := range rep.Groups {
		pm := "-"
		if g.PerMillionTokens != nil {
			pm = fmt.Sprintf("%.4f", *g.PerMillionTokens)
		}
		fmt.Fprintf(tw, "%s\t%.6f %s\t%.0f\t%.0f\t%.4f\t%s\t\n", g.Group, g.Spend, g.Currency, g.PromptTokens, g.CompletionTokens, g.GPUHours, pm)
		totals[g.Currency] += g.Spend
	}
	tw.Flush()
	if len(rep.Groups) == 0 {
		fmt.Fprintln(w, "no cost in this window")
	}
	for cur, t := range totals {
		fmt.Fprintf(w, "total %.6f %s (the pools' spend)\n", t, cur)
	}
}
