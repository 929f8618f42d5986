// Package cleanupsql is the SQL of clean-up's reports (the reads behind package
// cleanup's Check, Why, WhyAll, Status, Counts and Queue, and the count of objects
// collected that Collect's batches keep), which store/sqlite and
// store/postgres write alike but for a few fragments: how a value reads as text, how
// a row without a key is named, the clock, the placeholders, the reach query and how
// the database estimates a table's rows.
// Each store's clean-up dialect embeds Reports, instantiated with itself for those
// fragments, so the statements are written once and stay in store/, beside the rest
// of the stores' SQL on refset's tables.
package cleanupsql
