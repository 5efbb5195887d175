package segment

import "context"

// AllMarks are marks kept in more than one place: kv.Marks or
// cluster.PeerMarks, and the record a vendor keeps on its own disk beside
// an embedded store (storedir.Record), which outlives that store. A tag's
// mark is the highest any of them knows; a segment is recorded in each
// before it is served, so losing one of the places loses nothing.
type AllMarks []Marks

var (
	_ Marks   = AllMarks(nil)
	_ Lowerer = AllMarks(nil)
)

// Mark returns the highest of the marks of tag; an error when any of them
// cannot say: a mark not known is not a mark of 0.
func (m AllMarks) Mark(ctx context.Context, tag string) (int64, error) {
	var mark int64
	for _, mk := range m {
		v, err := mk.Mark(ctx, tag)
		if err != nil {
			return 0, err
		}
		mark = max(mark, v)
	}
	return mark, nil
}

// Record records end in each, in order; the first error stops it.
func (m AllMarks) Record(ctx context.Context, tag string, end int64) error {
	for _, mk := range m {
		if err := mk.Record(ctx, tag, end); err != nil {
			return err
		}
	}
	return nil
}

// Settle settles the allocation up to end in each.
func (m AllMarks) Settle(tag string, end int64, committed bool) {
	for _, mk := range m {
		mk.Settle(tag, end, committed)
	}
}

// Lower lowers tag's mark from from to to in each, in order, and says
// whether all did: the IDs are given back only then. One that is not a
// Lowerer gives nothing back. A mark lowered before another refused stays
// lowered, which is safe: the IDs above to were never handed out.
func (m AllMarks) Lower(ctx context.Context, tag string, from, to int64) (bool, error) {
	for _, mk := range m {
		low, ok := mk.(Lowerer)
		if !ok {
			return false, nil
		}
		done, err := low.Lower(ctx, tag, from, to)
		if err != nil || !done {
			return false, err
		}
	}
	return true, nil
}
