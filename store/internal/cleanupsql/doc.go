// Package cleanupsql is the SQL of clean-up's reports (the reads behind package
// cleanup's Check, Why, WhyAll, Status and Queue), which store/sqlite and
// store/postgres write alike but for a few fragments: how a value reads as text, how
// a row without a key is named, the clock, the placeholders and the reach query.
// Each store's clean-up dialect embeds Reports, instantiated with itself for those
// fragments, so the statements are written once and stay in store/, beside the rest
// of the stores' SQL on refset's tables.
package cleanupsql
