// A C++ code's halo exchange: a double-buffered sweep on std::vector
// fields, checked bit for bit against the same sweep of the whole grid in
// one process.
//
//   mpirun -n 4 ./heat2d
//
// Two fields of a periodic 2-D grid that does not divide evenly among the
// ranks: a temperature (double) and a tracer (float), each smoothed by a
// 9-point stencil (corners count) into a second buffer, the two buffers
// swapped each step (std::swap), as C++ codes hold them. One exchange is
// committed on the first buffers with the second lent
// (sode_exchange_lend_arrays) and started each step on whichever buffers
// hold the current values (sode_exchange_start_arrays). sode's statuses
// become exceptions, and its handles are freed by destructors, on every
// path out.
#include <mpi.h>
#include <sode_mpi.h>

#include <array>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace {

constexpr int NX = 41, NY = 29, STEPS = 12;

// A failed sode call: its status and sode's message.
struct sode_failure : std::runtime_error {
    int status;
    sode_failure(const char *call, int rc)
        : std::runtime_error(std::string(call) + " failed (" + sode_strerror(rc) + "): " + sode_last_error()),
          status(rc) {}
};

void check(const char *call, int rc) {
    if (rc != SODE_OK) {
        throw sode_failure(call, rc);
    }
}

// A sode communicator, freed with its owner.
class communicator {
  public:
    explicit communicator(MPI_Comm comm) { check("sode_comm_create_mpi", sode_comm_create_mpi(comm, 60.0, &c_)); }
    ~communicator() { sode_comm_free(&c_); }
    communicator(const communicator &) = delete;
    communicator &operator=(const communicator &) = delete;
    sode_comm *get() const { return c_; }

  private:
    sode_comm *c_ = nullptr;
};

// A sode exchange, freed with its owner.
class exchange {
  public:
    exchange(const communicator &sc, MPI_Comm cart) {
        const int halo[2] = {1, 1};
        check("sode_exchange_create_mpi_cart",
              sode_exchange_create_mpi_cart(sc.get(), cart, halo, halo, SODE_BOX, &x_));
    }
    ~exchange() { sode_exchange_free(&x_); }
    exchange(const exchange &) = delete;
    exchange &operator=(const exchange &) = delete;
    sode_exchange *get() const { return x_; }

  private:
    sode_exchange *x_ = nullptr;
};

// This rank's block of the grid: owned cells, and where they start.
struct block {
    std::array<int, 2> own, start;
    std::array<int64_t, 2> ext;  // owned plus one halo cell each side

    std::size_t at(int i, int j) const { return static_cast<std::size_t>(i) * static_cast<std::size_t>(ext[1]) + static_cast<std::size_t>(j); }
    std::size_t cells() const { return static_cast<std::size_t>(ext[0] * ext[1]); }
};

void split(int n, int parts, int c, int &start, int &size) {
    int q = n / parts, r = n % parts;
    start = c * q + (c < r ? c : r);
    size = q + (c < r ? 1 : 0);
}

template <typename T>
T initial(int gi, int gj) {
    return static_cast<T>((gi * 7 + gj * 13) % 17) + static_cast<T>(0.125) * static_cast<T>(gi);
}

// One smoothing step of the owned cells of `from` into `to`.
template <typename T>
void smooth(const block &b, const std::vector<T> &from, std::vector<T> &to) {
    for (int i = 1; i <= b.own[0]; i++) {
        for (int j = 1; j <= b.own[1]; j++) {
            T faces = from[b.at(i - 1, j)] + from[b.at(i + 1, j)] + from[b.at(i, j - 1)] + from[b.at(i, j + 1)];
            T corners = from[b.at(i - 1, j - 1)] + from[b.at(i - 1, j + 1)] + from[b.at(i + 1, j - 1)] +
                        from[b.at(i + 1, j + 1)];
            to[b.at(i, j)] = (static_cast<T>(4) * faces + corners + static_cast<T>(16) * from[b.at(i, j)]) /
                             static_cast<T>(36);
        }
    }
}

// The periodic halo of the whole grid, copied from its edges.
template <typename T>
void wrap(const block &g, std::vector<T> &a) {
    for (int i = 1; i <= NX; i++) {
        a[g.at(i, 0)] = a[g.at(i, NY)];
        a[g.at(i, NY + 1)] = a[g.at(i, 1)];
    }
    for (int j = 0; j <= NY + 1; j++) {
        a[g.at(0, j)] = a[g.at(NX, j)];
        a[g.at(NX + 1, j)] = a[g.at(1, j)];
    }
}

// The fields of a block: each in two buffers, the current one first.
struct fields {
    std::vector<double> heat, heat_next;
    std::vector<float> tracer, tracer_next;

    explicit fields(const block &b)
        : heat(b.cells()), heat_next(b.cells()), tracer(b.cells()), tracer_next(b.cells()) {}

    void fill(const block &b) {
        for (int i = 1; i <= b.own[0]; i++) {
            for (int j = 1; j <= b.own[1]; j++) {
                heat[b.at(i, j)] = initial<double>(b.start[0] + i, b.start[1] + j);
                tracer[b.at(i, j)] = initial<float>(b.start[0] + i, b.start[1] + j);
            }
        }
    }

    void step(const block &b) {
        smooth(b, heat, heat_next);
        smooth(b, tracer, tracer_next);
        std::swap(heat, heat_next);  // the vectors' buffers trade places
        std::swap(tracer, tracer_next);
    }
};

// Cells of `mine` that differ from the whole grid's `whole`, bit for bit.
template <typename T>
long differing(const block &b, const std::vector<T> &mine, const block &g, const std::vector<T> &whole) {
    long n = 0;
    for (int i = 1; i <= b.own[0]; i++) {
        for (int j = 1; j <= b.own[1]; j++) {
            T want = whole[g.at(b.start[0] + i, b.start[1] + j)];
            if (std::memcmp(&mine[b.at(i, j)], &want, sizeof want) != 0) {
                n++;
            }
        }
    }
    return n;
}

long run(MPI_Comm cart, const block &b) {
    communicator sc(cart);
    exchange x(sc, cart);
    fields f(b);
    const int64_t lo[2] = {1, 1}, own[2] = {b.own[0], b.own[1]};
    check("sode_exchange_add_field",
          sode_exchange_add_field(x.get(), f.heat.data(), SODE_F64, 2, b.ext.data(), lo, own, nullptr, nullptr,
                                  SODE_ORDER_C));
    check("sode_exchange_add_field",
          sode_exchange_add_field(x.get(), f.tracer.data(), SODE_F32, 2, b.ext.data(), lo, own, nullptr, nullptr,
                                  SODE_ORDER_C));
    // The second buffers, lent: over RDMA their faces travel in place too.
    void *next[2] = {f.heat_next.data(), f.tracer_next.data()};
    check("sode_exchange_lend_arrays", sode_exchange_lend_arrays(x.get(), 2, next));
    check("sode_exchange_commit", sode_exchange_commit(x.get()));

    // A misuse is an exception, and the exchange still works after it.
    try {
        void *one[1] = {f.heat.data()};
        check("sode_exchange_start_arrays", sode_exchange_start_arrays(x.get(), 1, one));
        throw std::logic_error("one array for two fields was taken");
    } catch (const sode_failure &e) {
        if (e.status != SODE_ERR_ARG) {
            throw;
        }
    }

    f.fill(b);
    for (int s = 0; s < STEPS; s++) {
        void *current[2] = {f.heat.data(), f.tracer.data()};
        check("sode_exchange_start_arrays", sode_exchange_start_arrays(x.get(), 2, current));
        check("sode_exchange_wait", sode_exchange_wait(x.get(), 60.0));
        f.step(b);
    }
    uint64_t staged = 0;
    check("sode_exchange_staged_starts", sode_exchange_staged_starts(x.get(), &staged));
    if (staged != 0) {
        throw std::logic_error(std::to_string(staged) + " starts on lent buffers went through sode's buffers");
    }

    // The same sweep of the whole grid, its periodic halo copied.
    block g{{NX, NY}, {0, 0}, {NX + 2, NY + 2}};
    fields w(g);
    w.fill(g);
    for (int s = 0; s < STEPS; s++) {
        wrap(g, w.heat);
        wrap(g, w.tracer);
        w.step(g);
    }
    return differing(b, f.heat, g, w.heat) + differing(b, f.tracer, g, w.tracer);
}

}  // namespace

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int size = 0, me = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int dims[2] = {0, 0}, periods[2] = {1, 1}, coords[2];
    MPI_Dims_create(size, 2, dims);
    MPI_Comm cart;
    MPI_Cart_create(MPI_COMM_WORLD, 2, dims, periods, 0, &cart);
    MPI_Comm_rank(cart, &me);
    MPI_Cart_coords(cart, me, 2, coords);
    block b{};
    split(NX, dims[0], coords[0], b.start[0], b.own[0]);
    split(NY, dims[1], coords[1], b.start[1], b.own[1]);
    b.ext = {b.own[0] + 2, b.own[1] + 2};
    long wrong = 0, total = 0;
    try {
        wrong = run(cart, b);
    } catch (const std::exception &e) {
        std::fprintf(stderr, "heat2d: rank %d: %s\n", me, e.what());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    MPI_Allreduce(&wrong, &total, 1, MPI_LONG, MPI_SUM, cart);
    if (me == 0) {
        std::printf("heat2d: %d ranks (%d x %d), %d x %d cells, %d steps of two fields (double, float) in swapped "
                    "std::vector buffers: %ld cells differ from one process's\n",
                    size, dims[0], dims[1], NX, NY, STEPS, total);
    }
    MPI_Comm_free(&cart);
    MPI_Finalize();
    return total == 0 ? 0 : 1;
}
