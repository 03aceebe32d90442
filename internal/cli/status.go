package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	"github.com/tidegpu/tidegpu/internal/engine"
	"github.com/tidegpu/tidegpu/internal/events"
	"github.com/tidegpu/tidegpu/internal/gateway"
)

// recentEvents is how many events `tidegpu status` lists.
const recentEvents = 5

// NewStatusCommand returns `tidegpu status`.
func NewStatusCommand() *cobra.Command {
	var (
		adminURL, output string
		watch            time.Duration
	)
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show pools, their instances, the gateway's backends and recent events",
		Long: `Show the pools and their instances, the gateway's backends and the last few
events, read from the admin API of ` + "`tidegpu up`" + ` (or of the operator).

Colour is used when standard output is a terminal and NO_COLOR is not set.
--output json prints the pools as the admin API returns them.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "table" && output != "json" {
				return fmt.Errorf("--output: %q is not supported: use table or json", output)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt)
			defer stop()
			token := os.Getenv("TIDEGPU_ADMIN_TOKEN")
			out := cmd.OutOrStdout()
			tty := isTerminal(out)
			colour := tty && os.Getenv("NO_COLOR") == ""
			for {
				if output == "json" {
					pools, err := fetchPools(ctx, adminURL, token)
					if err != nil {
						return err
					}
					enc := json.NewEncoder(out)
					enc.SetIndent("", "  ")
					if err := enc.Encode(pools); err != nil {
						return err
					}
				} else {
					snap, err := fetchStatus(ctx, adminURL, token)
					if err != nil {
						return err
					}
					if watch > 0 && tty {
						fmt.Fprint(out, "\033[H\033[2J") // clear the screen: not a colour
					}
					writeStatus(out, snap, time.Now(), colour)
				}
				if watch <= 0 {
					return nil
				}
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(watch):
				}
				if !tty && output == "table" {
					fmt.Fprintln(out, strings.Repeat("─", 40))
				}
			}
		},
	}
	f := cmd.Flags()
	f.StringVar(&adminURL, "admin", "http://127.0.0.1:9090", "admin API URL of tidegpu up or the operator (token from TIDEGPU_ADMIN_TOKEN)")
	f.StringVarP(&output, "output", "o", "table", "table or json")
	f.DurationVarP(&watch, "watch", "w", 0, "refresh every this long (e.g. 1s) until interrupted")
	return cmd
}

// isTerminal reports whether w is a terminal. Colour is used only there,
// and only when NO_COLOR is unset or empty (https://no-color.org).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// statusSnapshot is what one `tidegpu status` shows.
type statusSnapshot struct {
	Pools []engine.PoolView
	// Backends and Events are nil when the admin server has none to give
	// (an older server, or an error, named in the Err fields).
	Backends    []gateway.BackendStatus
	BackendsErr error
	Events      []events.Event
	EventsErr   error
}

var errNotServed = errors.New("not served by this admin server")

func fetchPools(ctx context.Context, base, token string) ([]engine.PoolView, error) {
	var pools []engine.PoolView
	if err := getJSON(ctx, base, "/api/v1/pools", token, &pools); err != nil {
		return nil, err
	}
	return pools, nil
}

// fetchStatus reads pools (required), backends and events (best effort).
func fetchStatus(ctx context.Context, base, token string) (statusSnapshot, error) {
	var s statusSnapshot
	var err error
	if s.Pools, err = fetchPools(ctx, base, token); err != nil {
		return s, err
	}
	s.BackendsErr = getJSON(ctx, base, "/api/v1/backends", token, &s.Backends)
	var evs []events.Event
	s.EventsErr = getJSON(ctx, base, "/api/v1/events", token, &evs)
	if len(evs) > recentEvents {
		evs = evs[len(evs)-recentEvents:]
	}
	s.Events = evs
	return s, nil
}

func getJSON(ctx context.Context, base, path, token string, v any) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(base, "/")+path, nil)
	if err != nil {
		return fmt.Errorf("--admin %q: %w", base, err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("reaching the admin API at %s: %w (is `tidegpu up` running? set --admin)", base, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	switch {
	case resp.StatusCode == http.StatusUnauthorized:
		return fmt.Errorf("the admin API at %s wants a token: set TIDEGPU_ADMIN_TOKEN", base)
	case resp.StatusCode == http.StatusNotFound:
		return fmt.Errorf("%s: %w", path, errNotServed)
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("admin API %s%s: %s: %s", base, path, resp.Status, strings.TrimSpace(string(body)))
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("admin API %s%s: decoding: %w", base, path, err)
	}
	return nil
}

// cellStyle is an ANSI style of the status tables.
type cellStyle int

const (
	stylePlain cellStyle = iota
	styleBold
	styleDim
	styleGreen
	styleYellow
	styleRed
	styleCyan
)

var sgr = map[cellStyle]string{styleBold: "1", styleDim: "2", styleGreen: "32", styleYellow: "33", styleRed: "31", styleCyan: "36"}

// tableCell is one table cell: its text and how to colour it.
type tableCell struct {
	text  string
	style cellStyle
}

func cellText(text string) tableCell             { return tableCell{text: text} }
func styled(text string, st cellStyle) tableCell { return tableCell{text: text, style: st} }
func cellInt(n int) tableCell                    { return tableCell{text: strconv.Itoa(n)} }
func paint(s string, st cellStyle) string        { return "\033[" + sgr[st] + "m" + s + "\033[0m" }

// writeTable writes an aligned table, two spaces between columns, the last
// column unpadded; with colour, the header is dim and cells keep their
// style (the padding is computed on the text, not the escapes).
func writeTable(w io.Writer, header []string, rows [][]tableCell, colour bool) {
	widths := make([]int, len(header))
	for i, h := range header {
		widths[i] = utf8.RuneCountInString(h)
	}
	for _, r := range rows {
		for i, cl := range r {
			if i < len(widths) {
				widths[i] = max(widths[i], utf8.RuneCountInString(cl.text))
			}
		}
	}
	line := func(cells []tableCell) {
		var b strings.Builder
		for i, cl := range cells {
			text := cl.text
			if colour && cl.style != stylePlain {
				text = paint(text, cl.style)
			}
			b.WriteString(text)
			if i < len(cells)-1 {
				b.WriteString(strings.Repeat(" ", widths[i]-utf8.RuneCountInString(cl.text)+2))
			}
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
	hs := make([]tableCell, len(header))
	for i, h := range header {
		hs[i] = styled(h, styleDim)
	}
	line(hs)
	for _, r := range rows {
		line(r)
	}
}

// writeStatus prints pools, instances, backends and recent events. It is
// pure: everything comes from s and now.
func writeStatus(w io.Writer, s statusSnapshot, now time.Time, colour bool) {
	title := func(t string) {
		if colour {
			t = paint(t, styleBold)
		}
		fmt.Fprintln(w, t)
	}
	title("POOLS")
	if len(s.Pools) == 0 {
		fmt.Fprintln(w, "  no pools")
	} else {
		rows := make([][]tableCell, 0, len(s.Pools))
		for _, p := range s.Pools {
			desired := p.Status.Desired
			readySt := styleGreen
			if p.Status.Ready < desired {
				readySt = styleYellow
			}
			if p.Status.Ready == 0 && desired > 0 {
				readySt = styleRed
			}
			cond := styled("-", styleDim)
			for _, cd := range p.Status.Conditions {
				if cd.Type == tidev1.ConditionReady {
					st := styleGreen
					if cd.Status != "True" {
						st = styleYellow
					}
					text := "Ready=" + string(cd.Status)
					if cd.Message != "" {
						text += " (" + cd.Message + ")"
					}
					cond = styled(text, st)
				}
			}
			rows = append(rows, []tableCell{styled(p.Name, styleBold), cellText(dash(p.Spec.Provider)),
				styled(fmt.Sprintf("%d/%d", p.Status.Ready, desired), readySt), cellInt(int(p.Status.Spot)),
				cellInt(int(p.Spec.Minimum)), cellInt(int(p.Spec.Maximum)), cond})
		}
		writeTable(w, []string{"POOL", "PROVIDER", "READY", "SPOT", "MIN", "MAX", "CONDITION"}, rows, colour)
	}

	fmt.Fprintln(w)
	title("INSTANCES")
	var rows [][]tableCell
	for _, p := range s.Pools {
		for _, in := range p.Status.Instances {
			age := "-"
			if !in.LaunchedAt.IsZero() {
				age = shortDuration(now.Sub(in.LaunchedAt.Time))
			}
			rows = append(rows, []tableCell{cellText(p.Name), cellText(in.ID), styled(in.Phase, phaseStyle(in.Phase)), cellText(dash(in.Address)),
				cellText(dash(in.Zone)), cellText(dash(in.Market)), cellText(age)})
		}
	}
	if len(rows) == 0 {
		fmt.Fprintln(w, "  no instances")
	} else {
		writeTable(w, []string{"POOL", "INSTANCE", "PHASE", "ADDRESS", "ZONE", "MARKET", "AGE"}, rows, colour)
	}

	if s.Backends != nil || (s.BackendsErr != nil && !errors.Is(s.BackendsErr, errNotServed)) {
		fmt.Fprintln(w)
		title("BACKENDS")
		switch {
		case s.BackendsErr != nil:
			fmt.Fprintf(w, "  unavailable: %v\n", s.BackendsErr)
		case len(s.Backends) == 0:
			fmt.Fprintln(w, "  no backends on this gateway")
		default:
			rows = rows[:0]
			var missing []string
			for _, b := range s.Backends {
				h, st := backendHealth(b)
				sig, sigStyle := backendSignals(b)
				if b.Signals != nil && !b.Signals.Fresh && b.Signals.Error != "" {
					missing = append(missing, fmt.Sprintf("  %s: %s", b.ID, truncate(b.Signals.Error, 160)))
				}
				ewma := "-"
				if b.EWMALatency > 0 {
					ewma = fmt.Sprintf("%.1fms", float64(b.EWMALatency)/float64(time.Millisecond))
				}
				fail := cellInt(int(b.Failures))
				if b.Failures > 0 {
					fail.style = styleYellow
				}
				rows = append(rows, []tableCell{cellText(b.Pool), cellText(b.ID), cellText(b.Address), styled(h, st), cellInt(b.Weight), cellInt(b.InFlight),
					cellInt(int(b.Requests)), fail, cellText(ewma), styled(sig, sigStyle)})
			}
			writeTable(w, []string{"POOL", "BACKEND", "ADDRESS", "HEALTH", "WEIGHT", "IN-FLIGHT", "REQUESTS", "FAILURES", "EWMA", "SIGNALS"}, rows, colour)
			if len(missing) > 0 {
				fmt.Fprintln(w, "missing signals (balanced on the gateway's own measurements):")
				for _, m := range missing {
					fmt.Fprintln(w, m)
				}
			}
		}
	}

	if s.Events != nil || (s.EventsErr != nil && !errors.Is(s.EventsErr, errNotServed)) {
		fmt.Fprintln(w)
		title("RECENT EVENTS")
		switch {
		case s.EventsErr != nil:
			fmt.Fprintf(w, "  unavailable: %v\n", s.EventsErr)
		case len(s.Events) == 0:
			fmt.Fprintln(w, "  no events yet")
		default:
			rows = rows[:0]
			for _, e := range s.Events {
				st := stylePlain
				if e.Type == events.TypeWarning {
					st = styleYellow
				}
				who := e.Pool
				if e.Instance != "" {
					who = e.Instance
				}
				rows = append(rows, []tableCell{cellText(shortDuration(now.Sub(e.Time)) + " ago"), styled(e.Reason, st), cellText(who), cellText(truncate(e.Message, 100))})
			}
			writeTable(w, []string{"AGE", "REASON", "OBJECT", "MESSAGE"}, rows, colour)
		}
	}
}

func phaseStyle(phase string) cellStyle {
	switch phase {
	case tidev1.PhaseReady:
		return styleGreen
	case tidev1.PhasePending, tidev1.PhaseStarting:
		return styleCyan
	case tidev1.PhaseDraining:
		return styleYellow
	case tidev1.PhaseTerminating:
		return styleRed
	}
	return stylePlain
}

func backendHealth(b gateway.BackendStatus) (string, cellStyle) {
	switch {
	case b.Removed:
		return "removed", styleDim
	case b.Draining:
		return "draining", styleYellow
	case b.Ejected:
		return "ejected", styleRed
	case !b.Healthy:
		return "unhealthy", styleRed
	}
	return "healthy", styleGreen
}

// backendSignals is the SIGNALS cell of a backend: where its own metrics
// come from and how old they are, or that they are missing.
func backendSignals(b gateway.BackendStatus) (string, cellStyle) {
	sig := b.Signals
	switch {
	case sig == nil:
		return "-", stylePlain
	case sig.Source == gateway.SignalGateway:
		return "gateway's own", styleDim
	case sig.Family == "ollama" && !sig.Fresh && sig.Error == "":
		return fmt.Sprintf("gateway's own; ollama %d loaded", len(sig.Loaded)), styleDim
	case sig.Fresh:
		text := sig.Source
		if sig.Family != "" {
			text += "/" + sig.Family
		}
		return text + " " + shortDuration(time.Duration(sig.Age*float64(time.Second))), stylePlain
	case sig.Error != "":
		return "MISSING", styleYellow
	case sig.ObservedAt.IsZero():
		return "not read yet", styleDim
	}
	return "stale " + shortDuration(time.Duration(sig.Age*float64(time.Second))), styleYellow
}

func truncate(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func shortDuration(d time.Duration) string {
	if d < 0 {
		d = 0
	}
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
