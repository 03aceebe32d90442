package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/tidegpu/tidegpu/internal/tenant"
)

func TestKeysHash(t *testing.T) {
	for _, tc := range []struct{ in, want, err string }{
		{"sk-abc\n", tenant.Hash("sk-abc"), ""},
		{"sk-abc", tenant.Hash("sk-abc"), ""},
		{"sk-abc\r\nrest", tenant.Hash("sk-abc"), ""},
		{"", "", "no key on standard input"},
		{"  \n", "", "no key on standard input"},
	} {
		cmd := NewKeysCommand()
		var out bytes.Buffer
		cmd.SetIn(strings.NewReader(tc.in))
		cmd.SetOut(&out)
		cmd.SetErr(&bytes.Buffer{})
		cmd.SetArgs([]string{"hash"})
		err := cmd.Execute()
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("%q: error %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || strings.TrimSpace(out.String()) != tc.want {
			t.Fatalf("%q: %q %v, want %s", tc.in, out.String(), err, tc.want)
		}
	}
}
