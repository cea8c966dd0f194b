-- A command's completion costs what it changed, not what the database holds.
--
-- Storing a tree counted its entries by scanning shell.tree_entries for the
-- trees just added; and the walks that keep a user's holdings in step with a
-- new root (unheld_trees, holding_cost, hold_root, release_root) are planned
-- from the table's statistics. A table that grew since it was last analyzed
-- (a database filled within the autovacuum's nap, at 50,000 files) was
-- planned as small, and each of those statements read all of it: a 1 MB
-- change in a 50,000-file home spent 60-100 ms completing. The new entries
-- are all a tree's entries (put_tree adds them in one statement), so the
-- count reads only them; and the walks, which only ever follow keys, are
-- never planned as scans of the whole table.

CREATE OR REPLACE FUNCTION shell.count_tree_entries() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
BEGIN
    UPDATE shell.trees t SET entries = c.own + c.below, widest = greatest(c.own, c.widest_below)
    FROM (SELECT a.tree, count(*) AS own, coalesce(sum(k.entries), 0) AS below,
                 coalesce(max(k.widest), 0) AS widest_below
          FROM added a
          LEFT JOIN shell.trees k ON a.kind = 'dir' AND k.hash = a.object
          GROUP BY a.tree) c
    WHERE t.hash = c.tree;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION shell.count_tree_entries() IS
    'Trigger on shell.tree_entries (per statement): sets each new tree''s entries (all below it) and widest '
    '(its largest directory) from the rows added, which are all of its entries (put_tree adds them at once).';

ALTER FUNCTION shell.unheld_trees(p_user_id uuid, p_root text) SET enable_seqscan = off;
ALTER FUNCTION shell.holding_cost(p_user_id uuid, p_fresh text[]) SET enable_seqscan = off;
ALTER FUNCTION shell.hold_root(p_user_id uuid, p_root text, p_n bigint) SET enable_seqscan = off;
ALTER FUNCTION shell.release_root(p_user_id uuid, p_root text, p_n bigint) SET enable_seqscan = off;
