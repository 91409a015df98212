// Package tree is the approximate multi-tenant radix tree behind the
// cache-aware load-balancing policy: it models which worker ("tenant")
// probably holds which prompt prefix in its KV cache. It is a Go port of the
// SGLang router's tree (sgl-model-gateway src/policies/tree.rs) with some
// deliberate improvements.
//
// # Data model
//
// The tree is keyed by characters, not bytes or tokens. A character is what
// utf8.DecodeRune yields: a valid UTF-8 sequence, or one byte of an invalid
// sequence (so invalid input is handled consistently and never panics).
// Comparisons are done on bytes (bytes.Equal, or a word-at-a-time common
// prefix) and then backed off to the nearest character boundary of both
// strings; boundaries are decided locally, because a non-continuation byte
// always starts a character. Children are kept in a slice sorted by the
// decoded first character (binary search), so CJK children that share first
// bytes are told apart correctly. Each node caches its length in characters,
// so a full match sums cached counts and only a partial remainder is
// counted.
//
// Each node holds a small slice of (tenant, timestamp) entries. A tenant is
// present on every node of every path it inserted, so the tenants of a child
// are always a subset of its parent's. Timestamps come from a per-tree
// atomic counter (an epoch, not wall time). A tenant's char count is the sum
// of the lengths of the nodes it is on; the tree also tracks the distinct
// chars stored (the sum of all node lengths) and the node count.
//
// # Concurrency
//
// There is no tree-wide lock, and readers take no lock at all. Each node
// publishes an immutable snapshot (text, char count, sorted child keys,
// children, tenant entries, parent) through an atomic pointer
// (read-copy-update). Match and the fast path of Insert load snapshots on
// the way down and validate each child's snapshot against the node they came
// from (same parent, not unlinked); if a concurrent split or unlink is
// observed they restart from the root. Tenant entries are shared by all
// snapshots of a node and carry an atomic timestamp, so re-inserting an
// existing (text, tenant) is a series of atomic compare-and-swaps (monotone
// maximum): no exclusive lock and no allocation. Node text bytes are never
// written after publication (a split copies both halves).
//
// A router matches a prompt and then records it under the worker it chose.
// MatchPath remembers the (node, snapshot) pairs it walked in a Path, and
// InsertPath of the same text only checks that those snapshots are still
// published and stamps them, instead of comparing the prompt a second time;
// any change in between makes it a plain Insert.
//
// Writers use a per-node mutex with lock coupling, always ancestor before
// descendant: inserts that change structure (new leaf, split, adding a
// tenant to a node) restart from the root holding the parent's mutex while
// taking the child's, build modified snapshots and publish them. Evict and
// RemoveTenant collect candidates from snapshots and remove each entry under
// the mutexes of the node and its parent, re-checking (with the children's
// mutexes) that the entry is still a leaf. Evict and RemoveTenant passes are
// serialized with each other by a per-tree mutex that Match and Insert never
// touch.
//
// # Differences from SGLang
//
//   - Timestamps: SGLang stamps only the node where an insert ends (inner
//     nodes keep 0) and touches about one match in eight. Here an Insert
//     stamps every node of its path for that tenant (an insert is a touch of
//     the whole path), and Match never writes. LRU eviction therefore sees a
//     shared prefix as recently used whenever any prompt under it was.
//   - Tenant choice: SGLang returns the node's creator ("last_tenant") or an
//     arbitrary tenant from the last visited node. Here the deepest node on
//     the path holding an eligible tenant decides, and the most recently
//     stamped eligible tenant there wins. MatchedChars counts through that
//     node, including partial chars only if it is the partially matched last
//     node. The root holds no tenants: if nothing matched, the result is
//     NoTenant with 0 matched chars (SGLang returns a root tenant).
//   - Filter instead of wipe: callers pass a Filter (e.g. healthy workers of
//     the right model) instead of rebuilding or wiping the tree when the
//     worker set changes; RemoveTenant removes a worker's entries for good.
//   - Budgets: MaxCharsPerTenant is SGLang's max_tree_size (a per-tenant
//     budget in chars). MaxCharsTotal is an additional per-tree budget over
//     the distinct chars stored, which bounds memory independently of the
//     number of workers. Both are enforced by one LRU pass in Evict, which
//     evicts the oldest (tenant, leaf) entries first; a node left with no
//     tenant is unlinked (nodes are never merged).
//   - Tenants are interned to dense TenantIDs. IDs are never reused: after
//     RemoveTenant the name keeps its ID and becomes active again on the next
//     Tenant or Insert call.
package tree
