// One user's day through supabase's postgrest-js, as a third-party web app would spend it:
// node scenario.mjs BASE_URL USERNAME PASSWORD
// Prints one JSON object: each step's {data, error, count, status}, for the Python test to judge.
import { PostgrestClient } from "@supabase/postgrest-js";

const [base, username, password] = process.argv.slice(2);
const results = {};

async function step(name, request) {
  const { data, error, count, status } = await request;
  results[name] = { data, error, count, status };
  return data;
}

const anonymous = new PostgrestClient(base);
await step("wrong_password",
  anonymous.rpc("login", { p_username: username, p_password: "wrong" }));
await step("anonymous_listing", anonymous.rpc("list_sessions"));
const { token } = await step("login",
  anonymous.rpc("login", { p_username: username, p_password: password }));

const api = new PostgrestClient(base, { headers: { Authorization: `Bearer ${token}` } });
const names = ["build", "deploy", "docs", "test", "triage"];
for (const name of names) await api.rpc("create_session", { p_name: name });
const listing = (options) => api.rpc("list_sessions", {}, options);

await step("renamed", listing().select("label:name").like("name", "d*")
  .order("name", { ascending: false }));
await step("in_list", listing({ get: true }).select("name").in("name", ["test", "build", "x"])
  .order("name"));
await step("or_tree", listing().select("name")
  .or("name.eq.triage,and(name.like.d*,name.neq.docs)").order("name"));
await step("negated", listing().select("name").not("name", "like", "*t*").order("name"));
await step("is_null_gte", listing().select("name").is("forked_from_command_id", null)
  .gte("name", "t").order("name"));
await step("page", listing({ count: "exact" }).select("name").order("name").range(2, 3));
await step("last_page", listing({ count: "exact" }).select("name").order("name").range(4, 5));
await step("head_count", listing({ head: true, count: "exact" }));
await step("single", listing().select("name").eq("name", "docs").single());
await step("single_of_many", listing().select("name").like("name", "t*").single());
await step("maybe_single_none", listing().select("name").eq("name", "none").maybeSingle());
await step("csv", listing().select("name").order("name").limit(2).csv());
await step("bad_column", listing().select("name,secret"));
await step("bad_operator", listing().filter("name", "regex", "x"));
await step("offset_past_end", listing({ count: "exact" }).range(10, 12));

const session = await api.rpc("create_session", { p_name: "work" }).then((r) => r.data);
await step("unknown_session", api.rpc("submit_command",
  { p_session_id: "00000000-0000-0000-0000-000000000000", p_command: "true" }));
for (const command of ["echo one", "false", "echo two"]) {
  await api.rpc("submit_command", { p_session_id: session, p_command: command });
}
// The executor runs them; poll as a page would (bounded: the Python test has the deadline).
for (let attempt = 0; attempt < 1200; attempt++) {
  const { count } = await api.rpc("latest_output", { p_session_id: session }, { count: "exact" })
    .select("id").in("status", ["done", "failed", "cancelled"]);
  if (count === 3) break;
  await new Promise((resolve) => setTimeout(resolve, 100));
}
await step("failed_commands", api.rpc("latest_output", { p_session_id: session }, { get: true })
  .select("command,exit_code").neq("exit_code", 0));
await step("echo_outputs", api.rpc("latest_output", { p_session_id: session })
  .select("output").like("command", "echo*").order("id", { ascending: false }));
await step("latest_command", api.rpc("latest_output", { p_session_id: session })
  .select("command,status").order("id", { ascending: false }).limit(1).single());

console.log(JSON.stringify(results));
