-- The lineage line of a session reads it through shell.readable_session
-- (0035), as its history and files do, instead of a lookup of its own:
-- one rule for which sessions a tenant may read, archived ones included.

CREATE OR REPLACE FUNCTION shell_api.session_lineage_html(p_session_id uuid) RETURNS shell_api."text/html"
LANGUAGE plpgsql STABLE SET search_path = '' AS $$
DECLARE
    s shell.sessions := shell.readable_session(p_session_id);
BEGIN
    RETURN array_to_string(
        CASE WHEN s.archived_at IS NOT NULL THEN ARRAY[format(
            '<span class="archived">archived <time datetime="%s">%s</time>: read only</span> '
            '<button type="button" class="unarchive" data-unarchive="%s">restore</button>',
            to_char(s.archived_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
            to_char(s.archived_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI "UTC"'), s.id)]
        ELSE '{}'::text[] END || shell.render_lineage(s), ' · ');
END
$$;
