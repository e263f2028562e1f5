// Package planner decides, once for every backend, the operations that
// make a store's snapshot hold one workload's update: which files the
// workload owns, what is stale and deleted, which shared files are
// written, how aggregated files are rebuilt (keeping the documents Kratix
// wrote there), and which paths a tree-shaped store cannot take.
//
// Its reader is whoever changes what a write does: statestore/driver's
// write loop calls PlanBatch on each attempt, and backends call PlanUpdate
// where they plan outside that loop (git's folded requests, seeding a
// store). Planning never writes; ownership is enforced here and nowhere
// else. What it consults besides the snapshot (the index, claims,
// adoption) is statestore/bookkeeping.
package planner
