package cli

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/pflag"

	"github.com/tidegpu/tidegpu/internal/costreport"
	"github.com/tidegpu/tidegpu/internal/notify"
)

// alertFlags are the webhooks budget alerts go to.
type alertFlags struct {
	json, slack []string
	secretFile  string
	report      string
}

func (a *alertFlags) register(f *pflag.FlagSet) {
	f.StringArrayVar(&a.json, "alert-webhook", nil, "URL budget alerts (50/80/100 % of a pool's monthly budget, forecast overrun) are POSTed to as JSON, signed with --alert-webhook-secret-file; repeatable")
	f.StringArrayVar(&a.slack, "alert-slack-webhook", nil, "Slack incoming-webhook URL budget alerts are posted to; repeatable (the URL is a secret: it is never logged)")
	f.StringVar(&a.report, "cost-report", "off", "daily, weekly or off: at each UTC day's (Monday's) start, POST the cost per tenant of the period that ended (spend, tokens, $/Mtok; idle apart) to the alert webhooks")
	f.StringVar(&a.secretFile, "alert-webhook-secret-file", "", "file holding the HMAC-SHA256 secret of the --alert-webhook deliveries (header X-Tidegpu-Signature)")
}

// schedule checks --cost-report: a report needs a webhook to go to.
func (a *alertFlags) schedule() (costreport.Schedule, error) {
	s, err := costreport.ParseSchedule(a.report)
	if err != nil {
		return "", err
	}
	if s != costreport.Off && len(a.json)+len(a.slack) == 0 {
		return "", fmt.Errorf("--cost-report %s: give the webhooks it goes to (--alert-webhook or --alert-slack-webhook)", s)
	}
	return s, nil
}

// sinks checks the flags and reads the secret.
func (a *alertFlags) sinks() ([]notify.Sink, error) {
	var secret []byte
	if a.secretFile != "" {
		b, err := os.ReadFile(a.secretFile)
		if err != nil {
			return nil, fmt.Errorf("--alert-webhook-secret-file: %w", err)
		}
		if secret = []byte(strings.TrimSpace(string(b))); len(secret) == 0 {
			return nil, fmt.Errorf("--alert-webhook-secret-file %s is empty: put the shared secret in it", a.secretFile)
		}
	}
	var out []notify.Sink
	for _, u := range a.json {
		out = append(out, notify.Sink{URL: u, Format: notify.FormatJSON, Secret: secret})
	}
	for _, u := range a.slack {
		out = append(out, notify.Sink{URL: u, Format: notify.FormatSlack})
	}
	if _, err := notify.New(notify.Options{Sinks: out}); err != nil {
		return nil, fmt.Errorf("--alert-webhook / --alert-slack-webhook: %w", err)
	}
	return out, nil
}
