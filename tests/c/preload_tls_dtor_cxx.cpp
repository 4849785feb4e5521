// C++ thread_local objects whose destructors allocate: registering them calls
// __cxa_thread_atexit_impl (which itself allocates), and they run at thread
// exit after or before the allocator's own cleanup. Each thread's last
// destructor hands a string to main, which checks it after the join.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

static std::mutex handed_lock;
static std::vector<std::string> *handed;
static std::atomic<long> destructors{0};

struct Noisy {
    int id;
    std::vector<std::string> words;
    std::map<int, std::string> index;
    explicit Noisy(int id_) : id(id_) {
        for (int i = 0; i < 50; i++) {
            words.push_back("word-" + std::to_string(id) + "-" + std::to_string(i) + std::string(i % 40, 'z'));
            index[i * 7] = words.back();
        }
    }
    ~Noisy() {
        // Allocate a lot while tearing down.
        std::string joined;
        for (auto &w : words) joined += w;
        auto copy = std::make_unique<std::map<int, std::string>>(index);
        std::vector<char> big(100000, 'b');
        if (copy->size() != 50 || big[99999] != 'b') {
            std::fprintf(stderr, "FAIL: destructor state\n");
            std::exit(1);
        }
        std::lock_guard<std::mutex> g(handed_lock);
        handed->push_back(std::to_string(id) + ":" + std::to_string(joined.size()));
        destructors++;
    }
};

static void work(int id) {
    thread_local Noisy first(id);
    thread_local std::unique_ptr<Noisy> second;
    second = std::make_unique<Noisy>(id + 1000);
    std::string s(200, 'q');
    first.words.push_back(s);
}

static size_t expected_joined(int id) {
    size_t n = 0;
    for (int i = 0; i < 50; i++)
        n += ("word-" + std::to_string(id) + "-" + std::to_string(i)).size() + size_t(i % 40);
    return n;
}

int main() {
    handed = new std::vector<std::string>();
    const int nthreads = 48;
    for (int round = 0; round < nthreads; round += 6) {
        std::vector<std::thread> ts;
        for (int i = round; i < round + 6; i++) ts.emplace_back(work, i);
        for (auto &t : ts) t.join();
    }
    // Each thread destroyed two objects; `first` got one extra word of 200.
    if (destructors != 2 * nthreads || handed->size() != size_t(2 * nthreads)) {
        std::fprintf(stderr, "FAIL: %ld destructors ran\n", destructors.load());
        return 1;
    }
    std::map<int, size_t> got;
    for (auto &h : *handed) {
        auto colon = h.find(':');
        got[std::stoi(h.substr(0, colon))] = std::stoul(h.substr(colon + 1));
    }
    for (int i = 0; i < nthreads; i++) {
        if (got[i] != expected_joined(i) + 200 || got[i + 1000] != expected_joined(i + 1000)) {
            std::fprintf(stderr, "FAIL: thread %d handed back a wrong string\n", i);
            return 1;
        }
    }
    std::printf("threads %d destructors %ld\n", nthreads, destructors.load());
    std::fflush(stdout);
    // The main thread's own thread_locals are destroyed during exit (and
    // still push into `handed`, which therefore stays alive).
    work(9999);
    return 0;
}
