package redistest

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// MoveSlot reshards one slot, with its keys, from the master serving it to
// the master to, as redis-cli --cluster reshard does (SETSLOT IMPORTING /
// MIGRATING, MIGRATE of its keys, SETSLOT NODE on every master). It
// returns once every master agrees to is the slot's owner.
func (c *Cluster) MoveSlot(slot int, to *Server) error {
	nodes, err := c.ClusterNodes()
	if err != nil {
		return err
	}
	var srcID, dstID string
	var src *Server
	for _, n := range nodes {
		if !n.Has("master") {
			continue
		}
		if n.Serves(slot) {
			srcID, src = n.ID, c.Server(n.Addr)
		}
		if n.Addr == to.Addr {
			dstID = n.ID
		}
	}
	if src == nil || dstID == "" {
		return fmt.Errorf("move slot %d: source %q or target %s not found", slot, srcID, to.Addr)
	}
	if src == to {
		return nil
	}
	s := strconv.Itoa(slot)
	if _, err := to.Do("CLUSTER", "SETSLOT", s, "IMPORTING", srcID); err != nil {
		return fmt.Errorf("importing: %w", err)
	}
	if _, err := src.Do("CLUSTER", "SETSLOT", s, "MIGRATING", dstID); err != nil {
		return fmt.Errorf("migrating: %w", err)
	}
	host, port, _ := strings.Cut(to.Addr, ":")
	for {
		out, err := src.Do("CLUSTER", "GETKEYSINSLOT", s, "100")
		if err != nil {
			return err
		}
		if out == "" {
			break
		}
		args := append([]string{"MIGRATE", host, port, "", "0", "5000", "KEYS"}, strings.Split(out, "\n")...)
		if _, err := src.Do(args...); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
	}
	for _, n := range c.Nodes {
		if !n.Alive() {
			continue
		}
		if _, err := n.Do("CLUSTER", "SETSLOT", s, "NODE", dstID); err != nil {
			return fmt.Errorf("setslot node on %s: %w", n.Addr, err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		agreed := true
		for _, n := range c.Nodes {
			out, err := n.Do("CLUSTER", "NODES")
			if err != nil {
				continue
			}
			for _, cn := range ParseNodes(out) {
				if cn.Serves(slot) && cn.ID != dstID {
					agreed = false
				}
			}
		}
		if agreed {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("move slot %d: masters do not agree on its new owner", slot)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
