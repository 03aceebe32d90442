// Package cost owns the cost model of TideGPU pools: what each instance
// costs, what that buys, and how it is reported. It is pure (an injected
// clock, no cloud calls) apart from its exporters; providers supply live
// prices as data through provider.OfferingSource. Markets, price sources and
// the offline price catalog are package market's; cost imports nothing else
// of the project.
//
//   - Prices: a Resolver that takes, in order, a pool's Override, a fresh
//     live price (LivePrices, fed from provider offerings, trusted for
//     MaxLiveAge), the catalog (market.Catalog: market.DefaultCatalog is the
//     embedded catalog.csv, every figure with its date and source), and for
//     spot with none of those the on-demand price labelled
//     market.PriceFallback, never silently.
//   - Ledger: instance lifetimes with the price in force over time (price
//     segments), busy time (at least one request in flight, fed from the
//     gateway's 0->1 / 1->0 transitions, cumulative samples or busy periods
//     reported by gateway replicas through a per-instance Meter, cheap on
//     the hot path) and tokens per model. From
//     these, per pool and window: spend (FOCUS EffectiveCost), the on-demand
//     equivalent (ListCost), savings, idle cost, run rate, and cost per
//     million tokens per model on an allocation and a usage basis.
//   - Money is exact: prices in integer nano-units per hour, time in integer
//     nanoseconds, costs summed as their exact 128-bit product; float64 only
//     when a figure is shown (see Money).
//   - Persistence: Snapshot/Restore (versioned JSON) with cursors so that
//     restoring and continuing counts nothing twice, and Compact, which
//     folds old lifetimes into per-hour aggregates to keep snapshots small.
//   - Budgets: EvaluateBudget over a calendar month in UTC, with the exact
//     time spend crossed the limit and the decision (Alert or hold the pool
//     at its minimum) for the engine to apply.
//   - Exporters: FOCUS 1.0 rows and CSV (FOCUSRows, WriteFOCUSCSV) and a
//     Prometheus Collector with OpenCost's node_total_hourly_cost.
package cost
