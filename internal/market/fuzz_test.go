package market

import (
	"strings"
	"testing"
)

// FuzzParseCatalog feeds outside input (a user's catalog file) to
// ParseCatalog: no panics, and every accepted row is a valid price.
func FuzzParseCatalog(f *testing.F) {
	f.Add(catalogCSV)
	f.Add("x,r,,t,spot,1,USD,2026-01-01,false,s\n")
	f.Add("@source,k,v\nx,*,,*,on-demand,0.5,CNY,2026-01-01,true,k\n")
	f.Add("\"unterminated")
	f.Fuzz(func(t *testing.T, in string) {
		c, err := ParseCatalog(strings.NewReader(in))
		if err != nil {
			return
		}
		for _, e := range c.Entries() {
			p, ok := c.Price(e.Provider, e.Region, e.InstanceType, e.Zone, e.Market)
			if !ok {
				t.Fatalf("entry %+v not found", e)
			}
			p.Source = "catalog"
			if err := p.Validate(); err != nil {
				t.Fatalf("accepted an invalid price %+v: %v", e, err)
			}
		}
	})
}
