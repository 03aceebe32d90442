// Package placement decides where a pool's instances run: in which zones, on
// which market, and which on-demand stand-ins leave once spot is back. It is
// the SpotHedge policy of SkyServe (Mao, Xia et al., "SkyServe: Serving AI
// Models across Regions and Clouds with Spot Instances", EuroSys 2025,
// https://arxiv.org/abs/2411.01438; its open implementation is SkyPilot's
// serve autoscaler and DynamicFallbackSpotPlacer, documented at
// https://docs.skypilot.co/en/latest/serving/spot-policy.html): spread spot
// instances over failure domains, overprovision cheap spot instances as a
// safeguard against preemptions, keep a base of on-demand instances, and fall
// back to on-demand while spot is short.
//
// A pool names a Strategy (Adaptive, the default; LowestPrice;
// ZoneResilient; OnDemand); Strategy.Resolve turns it, each round, into the
// Policy below. Adaptive reads what the CapacityMemory has learnt of the
// market (the size and rate of the pool's loss episodes, the notice, the
// pool's cold and warm starts) and keeps the least spare spot whose
// expected time below N is within 1 - target (strategy.go says how).
//
// The package is pure: Policy.Decide maps a snapshot (the wanted serving
// count N, the pool's live instances, the offerings and a CapacityMemory
// read at its injected clock) to a Decision, plain data with a reason for
// every launch and retirement. It launches nothing itself.
//
// # The policy, precisely
//
// Counting. Instances that are Leaving (an interruption notice, a drain, a
// termination) count for nothing: they are going. Stopped instances count
// for nothing live either (see Warm standby). Every other instance is
// live; live instances whose market is not on-demand are spot. Ready means
// the instance serves traffic.
//
// Targets. With N = max(0, Want):
//
//	base       = min(OnDemandBase, N)                  always-on on-demand instances
//	spotTarget = N - base + Overprovision              (0 when N = 0)
//	keepOD     = base + max(0, (N-base) - readySpot)   with SpotFallback, else base
//
// Spot launches. spotTarget - liveSpot spot instances are launched, one at a
// time, each on a usable spot offering: Available, in Zones (when set), and
// not Blocked in the CapacityMemory (it answered "insufficient capacity" or
// had an instance preempted within the memory's TTL, 3 minutes by
// default). Among usable offerings, those not preempted (no preemption
// within the memory's preempted hold: its PreemptedTTL, 1 hour by default,
// below; SpotHedge's "active" zones as opposed to its
// "preempted" ones) come first; then, with CheapFirst, the cheaper price;
// then the one whose zone
// holds the fewest of the pool's live spot instances (counting the
// launches already decided); then the one whose region (market.RegionOf: zones of
// one region often fail together) holds the fewest (with SpreadRegions
// the region comes before the zone); then the cheaper
// price; then the zone and instance type in name order. A preempted zone
// is thus used again only when no other zone can take the launch, or once
// its preempted hold is over. With MaxPerZone set, an offering whose zone
// already holds MaxPerZone of the pool's live spot (counting the launches
// decided) is not usable either. When no spot offering is usable, the
// remaining spot launches are Unplaced (with a note naming what was
// skipped and why); there is no on-demand substitute for them except the
// fallback and the cover below, and none for the Overprovision part.
//
// The preempted hold. A preemption holds its offering preempted for
// DefaultPreemptedTTL.
//
// Fallback. Without SpotFallback the pool keeps exactly base on-demand
// instances. With it, on-demand instances cover the part of N - base that
// spot does not: the pool launches on-demand until it holds
//
//	launchOD = base + max(0, (N-base) - (liveSpot + spot launches placed now))
//
// that is, only for spot that could not be placed (lazy fallback), or, with
// EagerFallback, until it holds keepOD (SkyServe's rule: a spot instance
// that is starting does not count until it is ready, so every gap in ready
// spot is covered by on-demand at once). On-demand launches take the cheapest
// usable on-demand offering; ties go to the zone holding fewer of the pool's
// live instances, then to name order.
//
// Cover for the loss of a failure domain. With CoverLoss (DomainZone or
// DomainRegion) the pool also holds enough on-demand that losing all its
// spot in any one domain leaves N. With worstLive the most live or placed
// spot in one domain, and worstReady the most ready spot in one domain:
//
//	coverKeep   = base + max(0, (N-base) - (readySpot - worstReady))
//	coverLaunch = base + max(0, (N-base) - (liveSpot + placed - worstLive))
//
// coverLaunch is coverKeep with EagerFallback. The pool launches on-demand
// up to max(launchOD, coverLaunch) and keepOD becomes max(keepOD,
// coverKeep). The cover needs no SpotFallback.
//
// Retirement, without a dip. On-demand instances beyond keepOD are retired;
// since keepOD only falls when ready spot rises, an on-demand stand-in
// leaves only after a spot instance that replaces it is Ready. Spot
// instances beyond spotTarget (N was lowered) are retired too. Not-ready
// instances go first (they serve nothing); among spot, those in the zone
// holding the most, then the most expensive; then the youngest. A ready
// instance is retired only while the pool keeps at least N ready instances
// without it, so a retirement never takes the pool below N ready.
//
// Warm standby. With Standby = K > 0 the pool keeps K stopped on-demand
// instances (an EC2 Auto Scaling warm pool's Stopped instances): each was
// Ready once, so its disk holds the model; stopped, it costs only its disk,
// and started it serves after a warm start. An instance that is Stopped
// (stopped or stopping) and not Leaving counts for nothing live (not spot,
// not on-demand, not ready); if it is on-demand it is standby, else it is
// retired. A standby instance can be started when, with K > 0, it is in
// Zones (when set) and its on-demand offering is not Blocked in the
// CapacityMemory; the others are noted. Every on-demand launch above
// (base, fallback, cover) first takes a startable standby instance
// instead (Decision.Starts; one start replaces one launch): the cheapest
// (by its on-demand offering's price), then the one whose zone holds the
// fewest of the pool's live instances (counting what is decided), then
// the oldest, then ID order; launches are made only for what standby
// cannot give. With standbyLeft the standby not started now, the
// on-demand retirements (Retirement, above) are decided as without a
// standby, then:
// each retired Ready on-demand instance, in their order, is stopped
// instead of terminated (Retire.Stop) while standbyLeft + stops < K; and,
// while N > 0, the last min(r, K - standbyLeft - stops) of the r not-ready
// on-demand instances retired (last in retirement order: the cheapest,
// then the oldest) are kept instead, to fill the standby; a not-ready
// instance is never stopped, as it has not loaded its model yet. Then,
// while N > 0, with held the live on-demand after this decision (starts
// and launches added, retirements taken away) beyond min(keepOD, L), L the
// on-demand count launched up to above, the pool launches K - (standbyLeft
// + stops + held) more on-demand instances (when positive) for the standby,
// on offerings chosen as for the other on-demand launches; each reason
// says so. Such an instance is surplus once it is Ready, and is then
// stopped while the standby is short. Stopped standby beyond K is
// terminated: first those that cannot be started, then the dearest (then
// the youngest). K = 0 (the default) starts and
// stops nothing, and terminates every stopped instance.
//
// What it does not do: move running spot instances to rebalance zones (as
// SpotHedge, it places replacements and new instances only; MaxPerZone
// keeps a zone from filling up in the first place), or predict
// preemptions beyond the CapacityMemory's preempted set. The engine applies the decision: launches with their zone and
// market, drains before terminating retired ready instances, and records
// every insufficient-capacity answer (CapacityMemory.Observe) and
// interruption notice (CapacityMemory.RecordPreemption) in the
// CapacityMemory.
package placement
