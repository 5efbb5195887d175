// Package leafcompat lets Meituan Leaf's users move to leaf-nats without
// repeating an ID or changing their clients.
//
// API answers leaf-server's HTTP API (GET /api/segment/get/{key} and
// /api/snowflake/get/{key}) as leaf-server does: the decimal ID alone, or
// Spring Boot's error body with Leaf's Result id (-1, -2, -3). It takes IDs
// from the same sources as the NATS service, past the same gates, with a
// bounded number of requests at once so that an HTTP flood cannot starve
// the NATS subjects.
//
// ParseLeafAlloc reads a dump of Leaf's leaf_alloc table (mysql -B's
// output, or CSV), and PlanImport decides, for each row, whether to create
// the tag or raise it so that its next ID is at least Leaf's max_id: Leaf
// raises max_id to the end of every segment it takes, in the same
// transaction, so no ID Leaf handed out is handed out again.
package leafcompat
