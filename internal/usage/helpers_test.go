package usage

import (
	"context"
	"errors"
	"time"

	"github.com/tidegpu/tidegpu/internal/engine"
)

// noPools is an admin.Pools with no pool: the admin API here only carries
// the usage endpoint and the cost report.
type noPools struct{}

func (noPools) Pools() []engine.PoolView                       { return nil }
func (noPools) Pool(string) (engine.PoolView, bool)            { return engine.PoolView{}, false }
func (noPools) Notice(string, string, time.Time, string) error { return errors.New("no pools") }
func (noPools) Reclaim(context.Context, string, string, time.Duration) error {
	return errors.New("no pools")
}
