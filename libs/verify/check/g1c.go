package check

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// edgeKind is a dependency between two committed transactions.
type edgeKind uint8

const (
	ww edgeKind = iota + 1 // the first wrote a partition before the second did
	wr                     // the second's process read a value of the first before it began
)

// edge is one dependency with what shows it: for ww the partition (an index
// into the sorted partitions) and the two offsets, for wr the poll and the
// index of the read in it.
type edge struct {
	from, to int32 // node numbers
	kind     edgeKind
	tp       int32 // ww only
	poll     int32 // wr only
	a, b     int64 // ww: the two offsets; wr: b is the read's index
}

// checkG1c finds cycles of ww and wr dependencies among the transactions
// known to have committed that contain at least one wr edge (see the package
// comment for why write-only cycles are left out).
func (c *checker) checkG1c() {
	// Nodes are the transactions known to have committed.
	node := make([]int32, len(c.h.Txns))
	var txnOf []int
	for i := range c.h.Txns {
		node[i] = -1
		if c.status[i] == committed || c.seenTxn[i] {
			node[i] = int32(len(txnOf))
			txnOf = append(txnOf, i)
		}
	}
	if len(txnOf) < 2 {
		return
	}
	edges := make([]edge, 0, len(c.vals))
	// ww: in each partition, consecutive writes of different transactions
	// (the order of the partition is total, so consecutive pairs keep every
	// path of the full relation).
	tps := make([]TopicPartition, 0, len(c.known))
	for tp := range c.known {
		tps = append(tps, tp)
	}
	slices.SortFunc(tps, func(a, b TopicPartition) int {
		return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
	})
	for tpi, tp := range tps {
		prev := candidate{txn: -1}
		for _, cd := range c.known[tp] {
			if node[cd.txn] < 0 {
				continue
			}
			if prev.txn >= 0 && prev.txn != cd.txn {
				edges = append(edges, edge{from: node[prev.txn], to: node[cd.txn], kind: ww, tp: int32(tpi),
					a: prev.offset, b: cd.offset, poll: -1})
			}
			prev = cd
		}
	}
	// wr: a read_committed poll's reads feed the first transaction its
	// process began after the poll ended.
	byProcess := map[int][]int{}
	for i, t := range c.h.Txns {
		if t.Start != 0 {
			byProcess[t.Process] = append(byProcess[t.Process], i)
		}
	}
	for _, ts := range byProcess {
		slices.SortStableFunc(ts, func(a, b int) int { return cmp.Compare(c.h.Txns[a].Start, c.h.Txns[b].Start) })
	}
	for pi, p := range c.h.Polls {
		if p.Isolation != ReadCommitted || p.End == 0 || len(p.Reads) == 0 {
			continue
		}
		ts := byProcess[p.Process]
		j, _ := slices.BinarySearchFunc(ts, p.End, func(t int, end int64) int {
			return cmp.Compare(c.h.Txns[t].Start, end)
		})
		if j == len(ts) || node[ts[j]] < 0 {
			continue
		}
		t2 := ts[j]
		for ri, r := range p.Reads {
			v, ok := c.ids[vkey{r.Topic, r.Value}]
			if !ok {
				continue
			}
			t1 := c.vals[v].txn
			if t1 < 0 || t1 == t2 || node[t1] < 0 {
				continue
			}
			edges = append(edges, edge{from: node[t1], to: node[t2], kind: wr, poll: int32(pi), b: int64(ri)})
		}
	}
	if len(edges) == 0 {
		return
	}
	// One edge per (from, to, kind), keeping the first witness.
	slices.SortStableFunc(edges, func(x, y edge) int {
		return cmp.Or(cmp.Compare(x.from, y.from), cmp.Compare(x.to, y.to), cmp.Compare(x.kind, y.kind))
	})
	edges = slices.CompactFunc(edges, func(x, y edge) bool { return x.from == y.from && x.to == y.to && x.kind == y.kind })

	n := len(txnOf)
	start := make([]int32, n+1) // CSR: node v's edges are edges[start[v]:start[v+1]]
	for _, e := range edges {
		start[e.from+1]++
	}
	for v := range n {
		start[v+1] += start[v]
	}
	comp := sccs(n, start, edges)

	// Report each strongly connected component that holds a wr edge, with
	// one cycle through it.
	reported := map[int32]bool{}
	for ei, e := range edges {
		if e.kind != wr || comp[e.from] != comp[e.to] || reported[comp[e.from]] {
			continue
		}
		reported[comp[e.from]] = true
		path := shortestPath(e.to, e.from, comp, start, edges)
		cycle := append([]int{ei}, path...)
		c.reportCycle(cycle, edges, txnOf, tps)
	}
}

// sccs numbers the strongly connected components of the graph (Tarjan's
// algorithm, iterative so a long chain cannot overflow the stack).
func sccs(n int, start []int32, edges []edge) []int32 {
	index := make([]int32, n) // 0: not visited yet
	low := make([]int32, n)
	onStack := make([]bool, n)
	comp := make([]int32, n)
	var stack []int32
	type frame struct{ v, next int32 }
	var call []frame
	counter, ncomp := int32(0), int32(0)
	visit := func(v int32) {
		counter++
		index[v], low[v] = counter, counter
		stack = append(stack, v)
		onStack[v] = true
		call = append(call, frame{v, start[v]})
	}
	for s := range int32(n) {
		if index[s] != 0 {
			continue
		}
		visit(s)
		for len(call) > 0 {
			f := &call[len(call)-1]
			v := f.v
			if f.next < start[v+1] {
				w := edges[f.next].to
				f.next++
				switch {
				case index[w] == 0:
					visit(w)
				case onStack[w]:
					low[v] = min(low[v], index[w])
				}
				continue
			}
			if low[v] == index[v] {
				for {
					w := stack[len(stack)-1]
					stack = stack[:len(stack)-1]
					onStack[w] = false
					comp[w] = ncomp
					if w == v {
						break
					}
				}
				ncomp++
			}
			call = call[:len(call)-1]
			if len(call) > 0 {
				u := call[len(call)-1].v
				low[u] = min(low[u], low[v])
			}
		}
	}
	return comp
}

// shortestPath returns the edges (indexes) of a shortest path from one node
// to another inside their component, by breadth-first search.
func shortestPath(from, to int32, comp []int32, start []int32, edges []edge) []int {
	if from == to {
		return nil
	}
	via := map[int32]int{from: -1} // node -> edge that reached it
	queue := []int32{from}
	for len(queue) > 0 {
		v := queue[0]
		queue = queue[1:]
		for ei := start[v]; ei < start[v+1]; ei++ {
			w := edges[ei].to
			if comp[w] != comp[from] {
				continue
			}
			if _, seen := via[w]; seen {
				continue
			}
			via[w] = int(ei)
			if w == to {
				var path []int
				for x := to; x != from; x = edges[via[x]].from {
					path = append(path, via[x])
				}
				slices.Reverse(path)
				return path
			}
			queue = append(queue, w)
		}
	}
	return nil // unreachable: both lie in one component
}

// maxCycleSteps bounds the steps a G1c message spells out.
const maxCycleSteps = 8

func (c *checker) reportCycle(cycle []int, edges []edge, txnOf []int, tps []TopicPartition) {
	first := edges[cycle[0]]
	firstRead := c.h.Polls[first.poll].Reads[first.b]
	txns := make([]int, 0, len(cycle))
	var procs []int
	var b strings.Builder
	t0 := txnOf[first.from]
	fmt.Fprintf(&b, "cycle of %d committed transactions: txn %d (process %d)", len(cycle), t0, c.h.Txns[t0].Process)
	for i, ei := range cycle {
		e := edges[ei]
		t := txnOf[e.from]
		txns = append(txns, t)
		if !slices.Contains(procs, c.h.Txns[t].Process) {
			procs = append(procs, c.h.Txns[t].Process)
		}
		if i == maxCycleSteps {
			fmt.Fprintf(&b, " ... (%d more steps)", len(cycle)-i)
			break
		}
		next := txnOf[e.to]
		switch e.kind {
		case wr:
			r := c.h.Polls[e.poll].Reads[e.b]
			fmt.Fprintf(&b, " -wr-> txn %d (process %d) [its poll %d read %q at %s offset %d before it began]",
				next, c.h.Txns[next].Process, e.poll, r.Value, r.TP(), r.Offset)
		default:
			fmt.Fprintf(&b, " -ww-> txn %d (process %d) [%s offset %d before offset %d]",
				next, c.h.Txns[next].Process, tps[e.tp], e.a, e.b)
		}
	}
	for _, ei := range cycle[min(len(cycle), maxCycleSteps+1):] {
		t := txnOf[edges[ei].from]
		txns = append(txns, t)
		if !slices.Contains(procs, c.h.Txns[t].Process) {
			procs = append(procs, c.h.Txns[t].Process)
		}
	}
	b.WriteString(": each transaction depends on the one before it, so no serial order explains what the " +
		"readers saw; look for a read_committed fetch that returned records of a transaction that had not committed " +
		"yet, or a write appended out of its transaction's order")
	c.add(Anomaly{Kind: G1c, Topic: firstRead.Topic, Partition: firstRead.Partition, Offset: firstRead.Offset,
		Value: firstRead.Value, Txn: t0, Poll: int(first.poll), Processes: procs, Cycle: txns, Msg: b.String()})
}
