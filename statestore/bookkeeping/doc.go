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
//   - load summaries (load.go): how many resources each destination
//     holds, read by ReadLoad and written here in one of two kinds, by
//     how a store orders its writers: counts in a git branch's commits
//     (loadcounts.go, over a snapshot's folder ids), ledgers kept exact by
//     conditional writes in an S3 bucket (loadledger.go, over a
//     LedgerStorage the backend implements);
//   - the mass-deletion breaker (breaker.go), counted from records.
//
// Its readers are the engine (what a render reads before it plans, what a
// write may delete) and the planner, which keeps the index and claims in
// step with every record it writes; backends give the load summaries
// their storage.
package bookkeeping
