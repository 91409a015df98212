package tree

// TenantChars returns how many characters the tree attributes to id: the
// size of the prefix cache the tree believes that tenant holds. It is O(1)
// and does not allocate. Unknown tenants have 0.
func (t *Tree) TenantChars(id TenantID) int {
	if st := t.state(id); st != nil {
		return int(st.chars.Load())
	}
	return 0
}
