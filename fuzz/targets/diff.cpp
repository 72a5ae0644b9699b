// `kgpu runtime configure --dry-run`'s unified diff, on two texts separated by a line
// "---8<---": applying the diff to the first must give the second, exactly (hunk numbers,
// context, "\ No newline at end of file").
#include "fuzz.h"
#include "runtime/diff.h"
#include "support/unified_patch.h"

using namespace kgpu;

KGPU_FUZZ_TARGET(diff) {
    const auto docs = fuzz::split_documents(fuzz::text(data, size), "---8<---", 2);
    if (docs.size() != 2) return -1;
    const std::string before(docs[0]), after(docs[1]);
    const std::string d = runtime::unified_diff(before, after, "a", "b");
    if (before == after) {
        KGPU_FUZZ_CHECK(d.empty(), d);
        return 0;
    }
    auto applied = test::apply_patch(before, d);
    KGPU_FUZZ_CHECK(applied.has_value(), d);
    KGPU_FUZZ_CHECK(*applied == after, d);
    return 0;
}
