// Package sqlstore holds what warren's SQL job stores (store/sqlite and
// store/postgres) share below the rules of package store: reading their
// embedded schema migrations and scanning the rows of answers both shape
// alike. Each driver keeps its own SQL.
//
// It is internal to package store's tree: the drivers import it, users
// cannot, so it changes with the drivers and with nothing else.
package sqlstore
