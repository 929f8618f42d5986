// Package otelrefset records what refset does as OpenTelemetry metrics. refset
// itself imports no metrics library: it tells a refset.Observer, given to a store
// through its Options.Observer, and New makes one that feeds a metric.Meter.
//
// Instruments (counters unless said):
//
//	refset.adds                objects stored by committed Add and AddAll calls
//	refset.handovers           Complete and CompleteTx calls, attribute result=ok|error
//	refset.handover.duration   histogram, seconds, attribute result
//	refset.retries             transactions refset ran again, attribute cause (a sentinel's text: "transaction conflict")
//	refset.conflicts           conflicts that outlasted the retries
//	refset.collected           objects clean-up deleted
//	refset.holds.expired       expired holds clean-up removed
//	refset.collect.batches     histogram, batch transactions per Collect that committed any
//	refset.replica.fallbacks   reads meant for the replica that the primary answered, attributes read, reason=missing|behind|failed
//	refset.queue.depth         gauge, entries in a set's review queue (exact up to cleanup.DefaultCountCap, estimated past it), attribute table (WatchQueue)
//	refset.queue.overdue       gauge, entries due now, attribute table (WatchQueue)
//
// The counters cost one instrument call on the paths of Add and Complete. The
// gauges read the queue once per collection of the meter's reader, which
// reads at most cleanup.DefaultCountCap entries and those due, however long the queue
// (Collector.Queue): a queue whose overdue count stays above zero between collections
// is clean-up falling behind.
package otelrefset
