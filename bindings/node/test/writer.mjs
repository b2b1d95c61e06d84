// A second Node process for test/writers.test.mjs: opens DB, takes the
// writer claim of session ID by appending through pi's Session, prints
// "ready <pid>", then stays alive until killed (or until stdin ends, when it
// closes the storage and prints "closed"). A refused write prints "refused
// <code> <message>" and exits 3.
import { Session } from "@earendil-works/pi-agent-core";
import { Archive } from "../index.js";

const [db, id] = process.argv.slice(2);
const archive = await Archive.open(db, { durability: "relaxed" });
const storage = await archive.storage(id);
const session = new Session(storage);
try {
  await session.appendMessage({ role: "user", content: `written by ${process.pid}`, timestamp: 1 });
} catch (e) {
  console.log(`refused ${e.code} ${e.message}`);
  process.exit(3);
}
console.log(`ready ${process.pid}`);
process.stdin.resume();
process.stdin.on("end", async () => {
  await storage.close();
  console.log("closed");
  process.exit(0);
});
