// Package bookkeeping is what render keeps in a store beside the
// workloads' files, and the reads and checks built on it:
//   - the placement index (index.go): per-destination entries a render
//     looks up instead of reading every record (ReadFacts, ReadLoad,
//     PlacedOn), and the migration of a store that predates it;
//   - claims (claims.go): which workload holds a Kubernetes object in a
//     destination's section, so a duplicate is refused (CheckClaims);
//   - Kratix adoption (adopt.go): which files Kratix wrote for a workload
//     that render takes over, and the check that an Adoption names only
//     the workload's own;
//   - the mass-deletion breaker (breaker.go), counted from records.
//
// Its readers are the engine (what a render reads before it plans, what a
// write may delete) and the planner, which keeps the index and claims in
// step with every record it writes. The load summaries a backend keeps
// (LoadSummarizer) are read through ReadLoad.
package bookkeeping
